// Checkpoints and resume end to end: a resumed run is bit-identical to one that never stopped, Ctrl-C
// writes a checkpoint and exits 130, a killed process never leaves an unreadable checkpoint, and the
// callbacks act on the monitored values.
#include <doctest/doctest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <thread>

#include "cli/cli_test_util.h"
#include "core/errors.h"
#include "models/checkpoint.h"

using namespace tctl::cli_test;
namespace fs = std::filesystem;

extern char** environ;

namespace {

// Starts `tensorctl ARGS` in `cwd` without waiting; stdout and stderr go to files in `cwd`/../.
pid_t spawn_tensorctl(const std::string& args, const TempDir& dir) {
  const std::string command = "cd " + quoted(dir.path()) + " && exec " + quoted(TENSORCTL_BINARY) + " " + args +
                              " >" + quoted(dir.path() / "out.txt") + " 2>" + quoted(dir.path() / "err.txt") + " </dev/null";
  const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
  pid_t pid = -1;
  REQUIRE(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) == 0);
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// Waits up to 60 s for `path` to appear; false when it never does.
bool wait_for(const fs::path& path) {
  for (int i = 0; i < 6000; ++i) {
    if (fs::exists(path)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

const std::string kDigits = quoted(source_path("configs/digits_mlp.json"));

}  // namespace

TEST_CASE("4 epochs straight and 2 then resumed to 4 give bit-identical weights and the same history") {
  TempDir dir;
  REQUIRE(run_tensorctl("train " + kDigits + " --epochs 4 --output straight --quiet", dir.path()).status == 0);
  REQUIRE(run_tensorctl("train " + kDigits + " --epochs 2 --output resumed --quiet", dir.path()).status == 0);
  CommandResult r = run_tensorctl("train " + kDigits + " --epochs 4 --resume resumed", dir.path());
  REQUIRE(r.status == 0);
  CHECK(r.out.find("Epoch 3/4") != std::string::npos);
  CHECK(r.out.find("Epoch 1/4") == std::string::npos);
  CHECK(r.out.find("epochs 3-4 (resumed)") != std::string::npos);
  CHECK(read_text(dir / "straight/weights.safetensors") == read_text(dir / "resumed/weights.safetensors"));
  // The history holds all four epochs; the losses agree to the digit (the seconds column differs).
  auto rows = [&](const char* run) {
    std::vector<std::string> out;
    for (const auto& line : split_lines(read_text(dir / run / "history.csv"))) out.push_back(line.substr(0, line.rfind(',')));
    return out;
  };
  CHECK(rows("straight").size() == 5);
  CHECK(rows("straight") == rows("resumed"));
  // Resuming a finished run trains nothing more.
  r = run_tensorctl("train " + kDigits + " --epochs 4 --resume resumed", dir.path());
  REQUIRE(r.status == 0);
  CHECK(r.out.find("no more epochs") != std::string::npos);
}

TEST_CASE("Ctrl-C finishes the step, writes a checkpoint, says how to resume and exits 130; resuming matches a straight run") {
  TempDir dir;
  REQUIRE(run_tensorctl("train " + kDigits + " --epochs 12 --output straight --quiet", dir.path()).status == 0);
  const pid_t pid = spawn_tensorctl("train " + kDigits + " --epochs 12 --output run --quiet", dir);
  // After the first epoch's checkpoint, so the signal lands while training runs.
  REQUIRE(wait_for(dir / "run/history.csv"));
  kill(pid, SIGINT);
  const int status = wait_exit(pid);
  const std::string out = read_text(dir / "out.txt");
  INFO(out << read_text(dir / "err.txt"));
  if (status == 0) {
    // The run was already in its last epoch: nothing to resume, and nothing to check.
    MESSAGE("training finished before the signal arrived");
    return;
  }
  REQUIRE(status == 130);
  CHECK(out.find("Interrupted: epoch ") != std::string::npos);
  CHECK(out.find("Resume with: tensorctl train ") != std::string::npos);
  CHECK(out.find("--resume run --epochs 12") != std::string::npos);
  CHECK(fs::exists(dir / "run/checkpoint.safetensors"));
  CHECK(!fs::exists(dir / "run/weights.safetensors"));
  CommandResult r = run_tensorctl("train " + kDigits + " --epochs 12 --resume run --quiet", dir.path());
  REQUIRE(r.status == 0);
  CHECK(read_text(dir / "straight/weights.safetensors") == read_text(dir / "run/weights.safetensors"));
}

TEST_CASE("a process killed at random points never leaves an unreadable checkpoint") {
  TempDir dir;
  std::mt19937 rng(12345);
  int checked = 0;
  for (int attempt = 0; attempt < 8; ++attempt) {
    const pid_t pid = spawn_tensorctl("train " + kDigits + " --epochs 400 --output run --quiet", dir);
    if (attempt == 0) REQUIRE(wait_for(dir / "run/checkpoint.safetensors"));
    std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 150000)(rng)));
    kill(pid, SIGKILL);
    wait_exit(pid);
    const fs::path ckpt = dir / "run/checkpoint.safetensors";
    if (!fs::exists(ckpt)) continue;
    ++checked;
    CHECK_NOTHROW(tctl::load_safetensors(ckpt));
    // And the run continues from it (a few more epochs, to keep the test short).
    CommandResult r = run_tensorctl("train " + kDigits + " --epochs 1 --resume run --quiet", dir.path());
    CHECK(r.status == 0);
  }
  CHECK(checked > 0);
}

TEST_CASE("EarlyStopping stops and restores the best weights; ModelCheckpoint saves the best epoch") {
  TempDir dir;
  // min_delta so large that nothing after the first epoch counts as better: training stops after epoch 2,
  // and restoring the best weights gives exactly the weights of a one-epoch run.
  dir.write("early.json", R"({"model": ")" + source_path("configs/models/digits_mlp.json").string() + R"(",
    "data": {"dataset": "digits"}, "epochs": 10, "seed": 42,
    "callbacks": [{"type": "EarlyStopping", "monitor": "val_loss", "patience": 1, "min_delta": 1000, "restore_best_weights": true},
                  {"type": "ModelCheckpoint", "monitor": "val_accuracy"}]})");
  CommandResult r = run_tensorctl("train early.json --output early", dir.path());
  REQUIRE(r.status == 0);
  CHECK(r.out.find("EarlyStopping: val_loss has not improved for 2 epochs") != std::string::npos);
  CHECK(r.out.find("EarlyStopping: restored the weights of epoch 1") != std::string::npos);
  CHECK(r.out.find("ModelCheckpoint: val_accuracy improved") != std::string::npos);
  CHECK(split_lines(read_text(dir / "early/history.csv")).size() == 4);  // header + epochs 1..3
  REQUIRE(run_tensorctl("train early.json --epochs 1 --output one --quiet", dir.path()).status == 0);
  CHECK(read_text(dir / "early/weights.safetensors") == read_text(dir / "one/weights.safetensors"));
  const auto best = tctl::load_safetensors(dir / "early/best.safetensors");
  CHECK(best.metadata.at("monitor") == "val_accuracy");
}

TEST_SUITE("bad input") {
TEST_CASE("resume refuses what is not a run of this model, and bad callbacks, writing nothing") {
  TempDir dir;
  dir.write("empty/readme.txt", "not a run");
  expect_user_error(dir, "train " + kDigits + " --resume empty", {"empty", "not a run directory (checkpoint.safetensors is missing)"});
  expect_user_error(dir, "train " + kDigits + " --resume missing", {"missing", "the run directory does not exist"});
  expect_user_error(dir, "train " + kDigits + " --resume x --output y", {"--output"});
  REQUIRE(run_tensorctl("train " + quoted(source_path("configs/iris_mlp.json")) + " --epochs 1 --output iris --quiet", dir.path()).status == 0);
  expect_user_error(dir, "train " + kDigits + " --resume iris", {"checkpoint.safetensors", "tensor \"dense/kernel\""});
  // A truncated checkpoint is refused, never a crash.
  const std::string bytes = read_text(dir / "iris/checkpoint.safetensors");
  dir.write("iris/checkpoint.safetensors", bytes.substr(0, bytes.size() / 2));
  expect_user_error(dir, "train " + quoted(source_path("configs/iris_mlp.json")) + " --resume iris", {"checkpoint.safetensors"});
  dir.write("cb.json", R"({"model": ")" + source_path("configs/models/iris_mlp.json").string() + R"(", "data": {"dataset": "iris"},
    "callbacks": [{"type": "EarlyStopping", "monitor": "val_los"}]})");
  expect_user_error(dir, "train cb.json", {"cb.json", "callbacks[0].monitor", "unknown quantity \"val_los\""});
  dir.write("cb2.json", R"({"model": ")" + source_path("configs/models/iris_mlp.json").string() + R"(", "data": {"dataset": "iris"},
    "callbacks": [{"type": "ReduceLROnPlateau", "factor": 1.5}]})");
  expect_user_error(dir, "train cb2.json", {"cb2.json", "callbacks[0].factor"});
}
}

TEST_CASE("a step gone NaN stops training with the epoch, step and first op, and the last good checkpoint stays") {
  TempDir dir;
  std::string rows = "a,b,label\n";
  for (int i = 0; i < 200; ++i) rows += std::to_string((i * 37 % 200) / 100.0 - 1.0) + "," + std::to_string((i * 91 % 200) / 100.0 - 1.0) + "," + std::to_string(i % 2) + "\n";
  dir.write("data.csv", rows);
  const std::string model = R"({"input_shape": [2], "layers": [{"type": "Dense", "units": 8, "activation": "relu"},
                                {"type": "Dense", "units": 2, "activation": "softmax"}]})";
  dir.write("good.json", R"({"model": )" + model + R"(, "data": {"csv": "data.csv"}, "epochs": 2, "optimizer": {"type": "sgd"}})");
  // The same model with a learning rate that blows the weights up at once.
  dir.write("bad.json", R"({"model": )" + model + R"(, "data": {"csv": "data.csv"}, "epochs": 4,
                            "optimizer": {"type": "sgd", "learning_rate": 1e36}})");
  REQUIRE(run_tensorctl("train good.json --output run --quiet", dir.path()).status == 0);
  const std::string before = read_text(dir / "run/checkpoint.safetensors");
  CommandResult r = run_tensorctl("train bad.json --resume run --quiet", dir.path());
  check_runtime_error(r, {"epoch 3, step ", "the first ", "came from op dense", "lower the learning rate"});
  CHECK(read_text(dir / "run/checkpoint.safetensors") == before);
}
