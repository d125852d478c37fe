// Where commands write: special files given as outputs are written in place and never replaced, symbolic
// links are followed, "-" is standard output, and a standard output that cannot be written fails the command
// (one whose reader went away ends it quietly).
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>

#include <doctest/doctest.h>

#include "cli/cli_test_util.h"

namespace tctl::cli_test {
namespace {

namespace fs = std::filesystem;

// What a shell line printed on stderr and the exit status of tensorctl inside it. `line` runs in `dir` with
// $T set to the binary; it must write tensorctl's status to the file `status`.
struct ShellResult {
  int status = -1;
  std::string err;
};

ShellResult run_shell(const TempDir& dir, const std::string& line) {
  const std::string command = "cd " + quoted(dir.path()) + " || exit 1; T=" + quoted(TENSORCTL_BINARY) + "; " + line;
  REQUIRE(std::system(command.c_str()) != -1);
  ShellResult r;
  r.status = std::stoi(read_text(dir / "status"));
  r.err = read_text(dir / "err");
  fs::remove(dir / "status");
  fs::remove(dir / "err");
  return r;
}

// Exit 1 and, after whatever the command reported on stderr, one error line naming standard output.
void check_stdout_failure(const ShellResult& r, const std::string& reason) {
  INFO("stderr: " << r.err);
  CHECK(r.status == 1);
  const auto lines = split_lines(r.err);
  REQUIRE(!lines.empty());
  CHECK(lines.back() == "error: cannot write standard output: " + reason);
  CHECK(r.err.find("error:") == r.err.rfind("error:"));
}

const std::string kSpec = quoted(source_path("configs/models/iris_mlp.json"));
const std::string kKeras = quoted(source_path("tests/data/keras/mlp_keras2.json"));

TEST_CASE("a standard output that cannot be written fails the command with exit 1") {
  TempDir dir;
  for (const std::string& args : {"summary " + kSpec, "summary " + kSpec + " --json", "import-keras " + kKeras,
                                  "graph " + kSpec + " --training"}) {
    INFO("tensorctl " << args);
    check_stdout_failure(run_shell(dir, "$T " + args + " >/dev/full 2>err; echo $? >status"),
                         "No space left on device");
    check_stdout_failure(run_shell(dir, "$T " + args + " >&- 2>err; echo $? >status"), "Bad file descriptor");
    // The reader is gone before tensorctl writes: no death by SIGPIPE, and no error either (`| head` is how
    // people read the start of an output; it printed "error: cannot write standard output: Broken pipe"): the
    // status coreutils' tools have there, 141, without a word.
    const ShellResult closed = run_shell(dir, "(sleep 0.3; $T " + args + " 2>err; echo $? >status) | true");
    INFO("stderr: " << closed.err);
    CHECK(closed.status == 141);
    CHECK(closed.err.find("error") == std::string::npos);
  }
}

TEST_CASE("train --json, predict and evaluate fail when standard output cannot be written") {
  TempDir dir;
  const std::string config = quoted(source_path("configs/iris_mlp.json"));
  check_stdout_failure(run_shell(dir, "$T train " + config +
                                          " --quiet --epochs 2 --output run --json >/dev/full 2>err; echo $? >status"),
                       "No space left on device");
  REQUIRE(fs::exists(dir / "run" / "summary.json"));
  check_stdout_failure(run_shell(dir, "$T predict --run run --input run/test.csv >/dev/full 2>err; echo $? >status"),
                       "No space left on device");
  check_stdout_failure(run_shell(dir, "$T evaluate --run run --data run/test.csv >/dev/full 2>err; echo $? >status"),
                       "No space left on device");
}

TEST_CASE("outputs: - and /dev/stdout are standard output, a FIFO is written in place, a link is followed") {
  TempDir dir;
  const CommandResult direct = run_tensorctl("import-keras " + kKeras, dir.path());
  REQUIRE(direct.status == 0);
  REQUIRE(!direct.out.empty());

  CommandResult dash = run_tensorctl("import-keras " + kKeras + " -o -", dir.path());
  CHECK(dash.status == 0);
  CHECK(dash.out == direct.out);
  CHECK_FALSE(fs::exists(dir / "-"));

  // Through a pipe, as `tensorctl ... -o /dev/stdout | less` would: /dev/stdout must stay the system's link.
  ShellResult piped =
      run_shell(dir, "$T import-keras " + kKeras + " -o /dev/stdout 2>err | cat >piped; echo 0 >status");
  CHECK(piped.status == 0);
  CHECK(read_text(dir / "piped") == direct.out);
  CHECK(fs::is_symlink("/dev/stdout"));

  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
  ShellResult fifo =
      run_shell(dir, "cat fifo >from_fifo & $T import-keras " + kKeras + " -o fifo 2>err; echo $? >status; wait");
  CHECK(fifo.status == 0);
  CHECK(read_text(dir / "from_fifo") == direct.out);
  CHECK(fs::is_fifo(dir / "fifo"));

  fs::create_directories(dir / "specs");
  fs::create_symlink("specs/iris.json", dir / "current.json");
  CommandResult linked = run_tensorctl("import-keras " + kKeras + " -o current.json", dir.path());
  CHECK(linked.status == 0);
  CHECK(fs::is_symlink(dir / "current.json"));
  CHECK(read_text(dir / "specs" / "iris.json") == direct.out);
}

TEST_CASE("an output that is a directory is refused before any work, with exit 2") {
  TempDir dir;
  fs::create_directories(dir / "taken");
  expect_user_error(dir, "import-keras " + kKeras + " -o taken", {"--output", "taken is a directory"});
  expect_user_error(dir, "profile " + kSpec + " --iterations 1 --trace taken", {"--trace", "taken is a directory"});
}

TEST_CASE("a closed standard output keeps its number while tensorctl runs: no file it opens takes it") {
  // On the GPU machine the CUDA driver's device files took a closed descriptor 1, and writes to "standard
  // output" failed with EINVAL. Here, while a long training runs with descriptor 1 closed, /proc shows what
  // holds that number: it must be the placeholder, /dev/null.
  TempDir dir;
  const std::string command =
      "cd " + quoted(dir.path()) + " || exit 1; " + quoted(TENSORCTL_BINARY) + " train " +
      quoted(source_path("configs/iris_mlp.json")) +
      " --output run --epochs 100000 --quiet >&- 2>err & pid=$!; seen=none; for i in $(seq 200); do "
      "seen=$(readlink /proc/$pid/fd/1 || echo none); [ \"$seen\" = /dev/null ] && break; sleep 0.05; done; "
      "kill $pid; wait $pid; echo \"$seen\" >seen";
  REQUIRE(std::system(command.c_str()) != -1);
  CHECK(read_text(dir / "seen") == "/dev/null\n");
}

}  // namespace
}  // namespace tctl::cli_test
