// read_whole: a file or a stream read to its end, in chunks, with a limit on its size. What models/io's
// read_file (JSON specs, configs, weights) and models/data's CSV reader share; each words its own errors.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

#include "core/function_ref.h"

namespace tctl {

struct ReadWhole {
  std::size_t max_bytes = 0;
  // Sees each chunk before it is kept, with what was kept before it; may throw (a CSV text with a NUL byte).
  FunctionRef<void(std::string_view chunk, const std::string& kept)> inspect;
  // The message of the SpecError thrown when the file holds more than max_bytes. `stream` names what gave
  // them when the file is a stream that may never end ("a character device", "a FIFO (a named pipe)"), and
  // is null for a regular file.
  FunctionRef<std::string(const char* stream)> too_large;
};

// The bytes of `path`, read in chunks rather than trusting a size from stat: pipes and /proc files report
// none. Errors are a SpecError naming `file_for_errors` ("cannot open file: <reason>", "cannot read file:
// <reason>", a directory among them, and too_large's message), or a RuntimeError when memory runs out.
std::string read_whole(const std::filesystem::path& path, const std::string& file_for_errors, const ReadWhole& read);

}  // namespace tctl
