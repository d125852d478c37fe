#include "core/read_whole.h"

#include <unistd.h>

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/errors.h"
#include "spec_error_check.h"

namespace tctl {
namespace {

// A file of `bytes` bytes (a repeating pattern) under a folder of this process's own.
std::filesystem::path scratch_file(const std::string& name, std::size_t bytes) {
  const auto dir = std::filesystem::temp_directory_path() / ("tctl_read_whole_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string text(bytes, '\0');
  for (std::size_t i = 0; i < bytes; ++i) text[i] = static_cast<char>('a' + i % 26);
  std::ofstream(dir / name, std::ios::binary) << text;
  return dir / name;
}

// read_whole with the given limit, recording each chunk's size and what was kept before it.
std::string read_recording(const std::filesystem::path& path, std::size_t max_bytes,
                           std::vector<std::pair<std::size_t, std::size_t>>& chunks) {
  return read_whole(
      path, "shown.txt",
      {.max_bytes = max_bytes,
       .inspect = [&](std::string_view got, const std::string& kept) { chunks.emplace_back(got.size(), kept.size()); },
       .too_large = [](const char* kind) { return std::string("too large, ") + (kind ? kind : "a file"); }});
}

SpecError read_error(const std::filesystem::path& path, std::size_t max_bytes) {
  std::vector<std::pair<std::size_t, std::size_t>> chunks;
  INFO("reading " << path);
  return testing::catch_spec_error([&] { read_recording(path, max_bytes, chunks); });
}

}  // namespace

TEST_CASE("read_whole reads a file of several chunks whole, in order, each seen before it is kept") {
  const std::size_t size = 3 * 65536 + 100;
  const auto path = scratch_file("three_chunks.txt", size);
  std::vector<std::pair<std::size_t, std::size_t>> chunks;
  const std::string text = read_recording(path, size, chunks);
  REQUIRE(text.size() == size);
  CHECK(text[0] == 'a');
  CHECK(text[size - 1] == static_cast<char>('a' + (size - 1) % 26));
  const std::vector<std::pair<std::size_t, std::size_t>> expected{
      {65536, 0}, {65536, 65536}, {65536, 131072}, {100, 196608}};
  CHECK(chunks == expected);
}

TEST_CASE("read_whole takes a file at its limit and refuses one byte more, with the hook's message") {
  const auto path = scratch_file("limit.txt", 1000);
  std::vector<std::pair<std::size_t, std::size_t>> chunks;
  CHECK(read_recording(path, 1000, chunks).size() == 1000);
  const SpecError e = read_error(path, 999);
  CHECK(e.file() == "shown.txt");
  CHECK(e.where() == "");
  CHECK(e.message() == "too large, a file");
  CHECK(read_error("/dev/zero", 1 << 20).message() == "too large, a character device");
}

TEST_CASE("read_whole names what it cannot open or read") {
  CHECK(read_error(scratch_file("x.txt", 1).parent_path() / "absent.txt", 100).message() ==
        "cannot open file: No such file or directory");
  CHECK(read_error(scratch_file("y.txt", 1).parent_path(), 100).message() == "cannot read file: Is a directory");
  // An empty file is read as empty, with no chunk to inspect.
  std::vector<std::pair<std::size_t, std::size_t>> chunks;
  CHECK(read_recording(scratch_file("empty.txt", 0), 100, chunks).empty());
  CHECK(chunks.empty());
}

}  // namespace tctl
