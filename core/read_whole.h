// read_whole: a file or a stream read to its end, in chunks, with a limit on its size. What models/io's
// read_file (JSON specs, configs, weights) and models/data's CSV reader share; each words its own errors.
#pragma once

#include <cstddef>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>

#include "core/function_ref.h"

namespace tctl {

// How read_whole reads one file. The hooks are references (FunctionRef): pass the lambdas in a braced
// temporary at the call, `read_whole(path, name, {.inspect = [&](...) {...}, ...})`, so they live as long as
// the call; a named ReadWhole built from lambdas would refer to temporaries already gone.
struct ReadWhole {
  // The most bytes the file may hold.
  std::size_t max_bytes = std::numeric_limits<std::size_t>::max();
  // False: each chunk is only shown to inspect, which always sees an empty `kept`, and the result is empty: a
  // first pass over a file that is read again, a piece at a time, instead of held whole.
  bool keep = true;
  // Sees each chunk before it is kept, with what was kept before it; may throw (a CSV text with a NUL byte).
  FunctionRef<void(std::string_view chunk, const std::string& kept)> inspect;
  // The message of the SpecError thrown when the file holds more than max_bytes. `kind` says what the file
  // is when it may be a stream without end ("a character device", "a FIFO (a named pipe)"); it is null for
  // anything else.
  FunctionRef<std::string(const char* kind)> too_large;
};

// The bytes of `path`, read in chunks rather than trusting a size from stat: pipes and /proc files report
// none. Errors are a SpecError naming `file_for_errors` ("cannot open file: <reason>", "cannot read file:
// <reason>", a directory among them, too_large's message, or what inspect throws), or a RuntimeError when
// memory runs out. Thread-safe: touches nothing but the file and the hooks.
std::string read_whole(const std::filesystem::path& path, const std::string& file_for_errors, const ReadWhole& read);

// The first `bytes` bytes of `path`, fewer when it is shorter, none when it cannot be read: enough to tell
// formats apart by their magic numbers (a zip, HDF5, NumPy or IDX array, PNG, JPEG) before reading it whole.
std::string file_head(const std::filesystem::path& path, std::size_t bytes = 16);

}  // namespace tctl
