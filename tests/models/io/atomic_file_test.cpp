#include "models/io/atomic_file.h"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "core/errors.h"
#include "models/test_files.h"
#include "spec_error_check.h"

namespace tctl {
namespace {

namespace fs = std::filesystem;

using testing::check_spec_error;
using testing::TempDir;

TEST_CASE("write_file_atomic writes the bytes and leaves no temporary file") {
  TempDir dir;
  const fs::path file = dir.path / "weights.bin";
  const std::string bytes("a\0b\xff\n", 5);
  write_file_atomic(file, bytes);
  CHECK(read_file(file, "weights.bin") == bytes);
  CHECK(dir.entries() == std::vector<std::string>{"weights.bin"});
}

TEST_CASE("write_file_atomic overwrites an existing file, longer and shorter") {
  TempDir dir;
  const fs::path file = dir.path / "out.txt";
  write_file_atomic(file, "first version, fairly long");
  write_file_atomic(file, "second");
  CHECK(read_file(file, "out.txt") == "second");
  write_file_atomic(file, "");
  CHECK(read_file(file, "out.txt").empty());
  CHECK(fs::file_size(file) == 0);
  CHECK(dir.entries() == std::vector<std::string>{"out.txt"});
}

TEST_CASE("write_file_atomic of pieces writes them in order; a producer that throws leaves the old file") {
  TempDir dir;
  const fs::path file = dir.path / "rows.csv";
  write_file_atomic(file, [](PieceWriter write) {
    write("a,b\n");
    write("");
    for (int i = 0; i < 3; ++i) write(std::to_string(i) + "," + std::to_string(i * i) + "\n");
  });
  CHECK(read_file(file, "rows.csv") == "a,b\n0,0\n1,1\n2,4\n");
  CHECK_THROWS_AS(write_file_atomic(file,
                                    [](PieceWriter write) {
                                      write("half a file");
                                      throw RuntimeError("the producer failed");
                                    }),
                  RuntimeError);
  CHECK(read_file(file, "rows.csv") == "a,b\n0,0\n1,1\n2,4\n");
  CHECK(dir.entries() == std::vector<std::string>{"rows.csv"});
}

TEST_CASE("write_file_atomic to a missing directory throws RuntimeError naming the path") {
  TempDir dir;
  const fs::path file = dir.path / "no_such_dir" / "out.txt";
  try {
    write_file_atomic(file, "x");
    FAIL("expected RuntimeError");
  } catch (const RuntimeError& e) {
    const std::string message = e.what();
    CHECK(message.find(file.string()) != std::string::npos);
    CHECK(message.find("No such file or directory") != std::string::npos);
  }
  CHECK(dir.entries().empty());
}

TEST_CASE("write_file_atomic removes its temporary file when the rename fails") {
  TempDir dir;
  // A non-empty directory at the target: the temporary file is written, then rename() refuses.
  const fs::path target = dir.path / "taken";
  fs::create_directories(target / "inside");
  CHECK_THROWS_AS(write_file_atomic(target, "payload"), RuntimeError);
  CHECK(dir.entries() == std::vector<std::string>{"taken"});
  CHECK(fs::is_directory(target / "inside"));
}

TEST_CASE("write_file_atomic from many threads leaves one complete version") {
  TempDir dir;
  const fs::path file = dir.path / "shared.bin";
  std::vector<std::string> payloads;
  for (int i = 0; i < 8; ++i) payloads.push_back(std::string(10000 + i, static_cast<char>('a' + i)));
  std::vector<std::thread> threads;
  for (const std::string& p : payloads)
    threads.emplace_back([&file, &p] {
      for (int k = 0; k < 5; ++k) write_file_atomic(file, p);
    });
  for (auto& t : threads) t.join();
  const std::string got = read_file(file, "shared.bin");
  CHECK(std::find(payloads.begin(), payloads.end(), got) != payloads.end());
  CHECK(dir.entries() == std::vector<std::string>{"shared.bin"});
}

TEST_CASE("read_file of a missing file is a SpecError naming the file") {
  TempDir dir;
  const SpecError e = check_spec_error([&] { read_file(dir.path / "absent.json", "configs/absent.json"); },
                                       "configs/absent.json", "", {});
  CHECK(e.message().find("cannot open file") == 0);
  CHECK(std::string(e.what()).find("configs/absent.json: cannot open file") == 0);
}

TEST_CASE("read_file of a directory is a SpecError") {
  TempDir dir;
  CHECK_THROWS_AS(read_file(dir.path, "dir"), SpecError);
}

TEST_CASE("read_file reads a file larger than its chunk size") {
  TempDir dir;
  std::string big(300000, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + 3);
  write_file_atomic(dir.path / "big", big);
  CHECK(read_file(dir.path / "big", "big") == big);
}

TEST_CASE("write_file_atomic follows a symbolic link: the link stays, its target gets the bytes") {
  TempDir dir;
  fs::create_directories(dir.path / "store");
  write_file_atomic(dir.path / "store" / "real.csv", "old");
  fs::create_symlink("store/real.csv", dir.path / "link.csv");
  fs::create_symlink("link.csv", dir.path / "link2.csv");  // a chain of two
  write_file_atomic(dir.path / "link2.csv", "new");
  CHECK(fs::is_symlink(dir.path / "link.csv"));
  CHECK(fs::is_symlink(dir.path / "link2.csv"));
  CHECK(read_file(dir.path / "store" / "real.csv", "real.csv") == "new");
  // A link whose target does not exist yet creates the target.
  fs::create_symlink("store/later.csv", dir.path / "dangling.csv");
  write_file_atomic(dir.path / "dangling.csv", "made");
  CHECK(fs::is_symlink(dir.path / "dangling.csv"));
  CHECK(read_file(dir.path / "store" / "later.csv", "later.csv") == "made");
  CHECK(fs::directory_iterator(dir.path / "store") != fs::directory_iterator());
}

TEST_CASE("write_file_atomic writes into a FIFO in place and leaves it a FIFO") {
  TempDir dir;
  const fs::path fifo = dir.path / "pipe";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string received;
  std::thread reader([&] { received = read_file(fifo, "pipe"); });
  write_file_atomic(fifo, "through the pipe");
  reader.join();
  CHECK(received == "through the pipe");
  CHECK(fs::is_fifo(fifo));
  CHECK(dir.entries() == std::vector<std::string>{"pipe"});
}

TEST_CASE("write_file_atomic writes a character device in place: /dev/null stays a device") {
  write_file_atomic("/dev/null", "discarded");
  CHECK(fs::is_character_file("/dev/null"));
}

TEST_CASE("check_output_path refuses what cannot be written before any work, naming the flag") {
  TempDir dir;
  auto refused = [](const std::string& path, const std::string& part) {
    INFO("path: " << path);
    check_spec_error([&] { check_output_path(path, "--output"); }, "", "--output", {part});
  };
  refused(dir.path.string(), "is a directory");
  refused((dir.path / "missing" / "out.csv").string(), "does not exist");
  refused("", "empty");
  fs::create_symlink("missing/out.csv", dir.path / "dangling");
  refused((dir.path / "dangling").string(), "does not exist");
  CHECK_NOTHROW(check_output_path("-", "--output"));
  CHECK_NOTHROW(check_output_path("/dev/null", "--output"));
  CHECK_NOTHROW(check_output_path((dir.path / "new.csv").string(), "--output"));
  CHECK(dir.entries() == std::vector<std::string>{"dangling"});
}

}  // namespace
}  // namespace tctl
