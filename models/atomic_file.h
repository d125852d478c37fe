// Whole-file I/O: write a file so readers see either the old contents or the new, never a torn mix; read a
// file whole. Checkpoints, exported specs and histories are written through here.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace tctl {

// Replaces `path` with exactly `bytes`. Writes a temporary sibling `<path>.tmp.<pid>.<counter>`, flushes and
// fsyncs it, renames it over `path` and then fsyncs the directory (best effort). A crash at any point leaves
// either the old file or the new one; at worst a stray `.tmp.` sibling survives a crash.
// On failure (missing directory, no permission, disk full) the temporary file is removed, `path` is left
// untouched, and RuntimeError names `path` and the system's reason.
// Thread-safe: concurrent calls use distinct temporary names; for the same `path`, the last rename wins.
// A symlink at `path` is replaced, not followed.
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

// The whole contents of `path`. A missing or unreadable file is the user's mistake: SpecError with
// `file_for_errors` (the path as the user spelled it) as the file, no JSON path, and the system's reason
// ("cannot open file: No such file or directory"). Thread-safe.
std::string read_file(const std::filesystem::path& path, const std::string& file_for_errors);

}  // namespace tctl
