// Whole-file I/O: write a file so readers see either the old contents or the new, never a torn mix; read a
// file whole. Checkpoints, exported specs and histories are written through here.
#pragma once

#include <filesystem>
#include <limits>
#include <string>
#include <string_view>

#include "core/function_ref.h"

namespace tctl {

// The one writer of every output tensorctl produces (run directories, --output, --trace, -o).
// What it does depends on what `path` is:
// - a regular file or a new path: writes a temporary sibling `<path>.tmp.<pid>.<counter>`, flushes and fsyncs
//   it, renames it over `path` and fsyncs the directory (best effort). A crash at any point leaves either
//   the old file or the new one; at worst a stray `.tmp.` sibling survives a crash.
// - a symbolic link (a chain of them, or one whose target does not exist yet): its final target is written
//   the same way; the link itself stays.
// - a FIFO or a character device (/dev/null, /dev/stdout, a terminal): written in place, never replaced.
// - "-", /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N: that descriptor of this process, in place,
//   after whatever the program printed there before.
// - a directory, a block device or a socket: refused.
// On failure (missing directory, no permission, disk full) the temporary file is removed, `path` is left
// untouched, and RuntimeError names `path` and the system's reason.
// Thread-safe: concurrent calls use distinct temporary names; for the same `path`, the last rename wins.
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

// The bytes a producer writes a piece at a time, in order, through `write`.
using PieceWriter = FunctionRef<void(std::string_view piece)>;
// write_file_atomic of contents made a piece at a time: `produce` calls its PieceWriter with each piece, and
// the pieces go to the file as they come, so the contents are never held whole (a run's test.csv of 12,000
// x 785 cells was 23 MB of string, bench/csv_load.sh). The same destinations and the same guarantees: where
// the file is replaced, an exception from `produce` leaves it untouched.
void write_file_atomic(const std::filesystem::path& path, FunctionRef<void(PieceWriter)> produce);

// Appends `bytes` to the existing file `path` (O_APPEND), and with `sync` flushes it to the disk before
// returning. The one writer that does not replace its file: for a log that grows (a run's history.csv),
// where rewriting it whole at each step would cost its whole length each time. A crash may leave the last
// bytes appended cut short; the caller's format must tolerate that. RuntimeError names `path` and the
// system's reason on failure (a missing file included).
void append_file(const std::filesystem::path& path, std::string_view bytes, bool sync);

// Checks, before any work is done, that write_file_atomic can write `path` given by the user with `flag`
// ("--output"): "-" or an existing regular file, FIFO or character device, or a new name in an existing
// directory (through symbolic links). Anything else is a SpecError naming the flag and the path.
void check_output_path(const std::string& path, const std::string& flag);

// The file write_file_atomic(path) writes: the end of `path`'s chain of symbolic links (which may not exist
// yet), or `path` itself when it is no link.
std::filesystem::path final_target(const std::filesystem::path& path);

// The whole contents of `path`. A missing or unreadable file is the user's mistake: SpecError with
// `file_for_errors` (the path as the user spelled it) as the file, no JSON path, and the system's reason
// ("cannot open file: No such file or directory"), as is a file longer than `max_bytes` (a spec that
// is a device without end); memory running out is a RuntimeError naming the file. Thread-safe.
std::string read_file(const std::filesystem::path& path, const std::string& file_for_errors,
                      std::size_t max_bytes = std::numeric_limits<std::size_t>::max());

}  // namespace tctl
