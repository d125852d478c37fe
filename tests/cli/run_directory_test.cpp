// A run directory never mixes two runs: train refuses a directory that is not empty unless --overwrite is
// given, and --overwrite deletes the old run's files (and only tensorctl's files) before it writes anything.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <utility>

#include "cli/cli_test_util.h"

using namespace tctl::cli_test;
namespace fs = std::filesystem;

namespace {

const std::string kIris = quoted(source_path("configs/iris_mlp.json"));

// The iris config with a ModelCheckpoint callback writing `filename`.
std::string iris_with_checkpoint(const std::string& filename) {
  return R"({"model": ")" + source_path("configs/models/iris_mlp.json").string() + R"(", "data": "iris", "epochs": 2,
    "callbacks": [{"type": "ModelCheckpoint", "monitor": "val_loss", "filename": ")" +
         filename + R"("}]})";
}

}  // namespace

TEST_CASE("train refuses a run directory that is not empty, naming --overwrite and --resume, and writes nothing") {
  TempDir dir;
  REQUIRE(run_tensorctl("train " + kIris + " --epochs 1 --output run --quiet", dir.path()).status == 0);
  const std::string weights = read_text(dir / "run/weights.safetensors");
  expect_user_error(dir, "train " + kIris + " --epochs 2 --output run",
                    {"run: ", "not empty", "--overwrite", "--resume run"});
  CHECK(read_text(dir / "run/weights.safetensors") == weights);
  // A directory holding anything else is refused too, suggesting neither flag: --overwrite replaces only a run.
  dir.write("notes/readme.txt", "mine\n");
  const CommandResult notes = expect_user_error(
      dir, "train " + kIris + " --output notes",
      {"notes: the run directory exists and is not empty, and holds no tensorctl run", "another --output"});
  CHECK(notes.err.find("--overwrite") == std::string::npos);
  CHECK(notes.err.find("--resume") == std::string::npos);
  // An empty directory is as good as a new one.
  fs::create_directory(dir / "empty");
  CHECK(run_tensorctl("train " + kIris + " --epochs 1 --output empty --quiet", dir.path()).status == 0);
  CHECK(fs::exists(dir / "empty/weights.safetensors"));
}

TEST_CASE("--overwrite deletes every file of the old run first, callbacks' files and stray temporaries included") {
  TempDir dir;
  dir.write("old.json", iris_with_checkpoint("old_best.safetensors"));
  REQUIRE(run_tensorctl("train old.json --output run --quiet", dir.path()).status == 0);
  REQUIRE(fs::exists(dir / "run/old_best.safetensors"));
  dir.write("run/history.csv.tmp.999.1", "left by a killed process");
  // The new run, without callbacks, writes no best weights: none of the old run's may stay beside its own.
  REQUIRE(run_tensorctl("train " + kIris + " --epochs 1 --output run --overwrite --quiet", dir.path()).status == 0);
  REQUIRE(run_tensorctl("train " + kIris + " --epochs 1 --output fresh --quiet", dir.path()).status == 0);
  auto names = [&](const char* run) {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(dir / run)) out.insert(e.path().filename().string());
    return out;
  };
  CHECK(names("run") == names("fresh"));
  CHECK(read_text(dir / "run/weights.safetensors") == read_text(dir / "fresh/weights.safetensors"));

  // An interrupted run (no summary yet) is a run too; its callback file is known from the checkpoint.
  dir.write("new.json", iris_with_checkpoint("new_best.safetensors"));
  REQUIRE(run_tensorctl("train new.json --output interrupted --quiet", dir.path()).status == 0);
  fs::remove(dir / "interrupted/summary.json");
  REQUIRE(run_tensorctl("train " + kIris + " --epochs 1 --output interrupted --overwrite --quiet", dir.path()).status ==
          0);
  CHECK(names("interrupted") == names("fresh"));
}

TEST_CASE("a run that failed in its first epoch leaves no checkpoint: only --overwrite is suggested, and works") {
  TempDir dir;
  nlohmann::json config = read_json(source_path("configs/iris_mlp.json"));
  config["model"] = source_path("configs/models/iris_mlp.json").string();
  config["optimizer"] = {{"type", "sgd"}, {"learning_rate", 1e36}};
  dir.write("diverge.json", config.dump());
  check_runtime_error(run_tensorctl("train diverge.json --output run --quiet", dir.path()), {"epoch 1, step "});
  REQUIRE(fs::exists(dir / "run/model.json"));
  REQUIRE(!fs::exists(dir / "run/checkpoint.safetensors"));
  // It said: pass --overwrite, or --resume run, which then failed for want of a checkpoint.
  const CommandResult again =
      expect_user_error(dir, "train " + kIris + " --epochs 1 --output run",
                        {"run: the run directory exists and holds a run without a checkpoint", "pass --overwrite"});
  CHECK(again.err.find("--resume") == std::string::npos);
  expect_user_error(dir, "train " + kIris + " --epochs 1 --resume run",
                    {"run: cannot resume: the run in it has no checkpoint.safetensors",
                     "train it again with --output run --overwrite"});
  REQUIRE(run_tensorctl("train " + kIris + " --epochs 1 --output run --overwrite --quiet", dir.path()).status == 0);
  CHECK(fs::exists(dir / "run/checkpoint.safetensors"));
}

TEST_SUITE("bad input") {
  TEST_CASE("--overwrite never deletes a file tensorctl did not write, and is refused with --resume") {
    TempDir dir;
    REQUIRE(run_tensorctl("train " + kIris + " --epochs 1 --output run --quiet", dir.path()).status == 0);
    dir.write("run/notes.txt", "mine\n");
    expect_user_error(dir, "train " + kIris + " --output run --overwrite", {"run: ", "notes.txt", "not one of them"});
    CHECK(fs::exists(dir / "run/weights.safetensors"));
    fs::remove(dir / "run/notes.txt");
    fs::create_directory(dir / "run/plots");
    expect_user_error(dir, "train " + kIris + " --output run --overwrite", {"run: ", "plots"});
    // A directory that holds no run at all is not tensorctl's to clear.
    dir.write("data/points.csv", "x,label\n1,0\n");
    expect_user_error(dir, "train " + kIris + " --output data --overwrite", {"data: ", "holds none"});
    expect_user_error(dir, "train " + kIris + " --resume run --overwrite", {"--overwrite", "--resume"});
  }
}

namespace {

extern "C" char** environ;

// Starts `tensorctl ARGS` in `dir` without waiting; its stdout and stderr go to `name`.out and `name`.err there.
pid_t spawn_tensorctl(const std::string& args, const TempDir& dir, const std::string& name) {
  return tctl::cli_test::spawn_tensorctl(args, dir.path(), dir / (name + ".out"), dir / (name + ".err"));
}

// A pid no process has: one that ran /bin/true and was reaped.
pid_t dead_pid() {
  const char* argv[] = {"/bin/true", nullptr};
  pid_t pid = -1;
  REQUIRE(posix_spawn(&pid, "/bin/true", nullptr, nullptr, const_cast<char**>(argv), environ) == 0);
  waitpid(pid, nullptr, 0);
  return pid;
}

// Holds `dir`/tensorctl.lock as a tensorctl process would, with this process's pid in it.
class HeldLock {
 public:
  HeldLock(const fs::path& dir, int operation) {
    fd_ = ::open((dir / "tensorctl.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    REQUIRE(fd_ >= 0);
    REQUIRE(::flock(fd_, operation | LOCK_NB) == 0);
    if (operation == LOCK_EX) {
      const std::string pid = std::to_string(::getpid()) + "\n";
      REQUIRE(::ftruncate(fd_, 0) == 0);
      REQUIRE(::pwrite(fd_, pid.data(), pid.size(), 0) == static_cast<ssize_t>(pid.size()));
    }
  }
  ~HeldLock() { ::close(fd_); }
  HeldLock(const HeldLock&) = delete;
  HeldLock& operator=(const HeldLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

TEST_CASE("a run directory has one writer: a second is refused naming the directory and the holder's pid") {
  TempDir dir;
  REQUIRE(run_tensorctl("train " + kIris + " --epochs 1 --output run --quiet", dir.path()).status == 0);
  CHECK(fs::exists(dir / "run/tensorctl.lock"));
  const std::string weights = read_text(dir / "run/weights.safetensors");
  const std::string pid = std::to_string(::getpid());
  {
    // As a train or a resume in progress holds it.
    HeldLock writer(dir / "run", LOCK_EX);
    const std::string held = "run: another tensorctl process (pid " + pid + ") is writing this run directory";
    expect_user_error(dir, "train " + kIris + " --epochs 1 --output run --overwrite",
                      {held, "choose another --output"});
    expect_user_error(dir, "train " + kIris + " --epochs 2 --resume run", {held});
    // Readers do not read a run while it is being replaced.
    expect_user_error(dir, "predict --run run --input run/test.csv", {held});
    expect_user_error(dir, "evaluate --run run --data run/test.csv", {held});
  }
  {
    // As a predict or an evaluate holds it: readers share it; a writer waits 10 s for them, then gives up.
    HeldLock reader(dir / "run", LOCK_SH);
    expect_user_error(dir, "train " + kIris + " --epochs 1 --output run --overwrite",
                      {"run: other tensorctl processes (predict, evaluate or export) kept reading this run directory "
                       "for 10 s"});
    CHECK(run_tensorctl("predict --run run --input run/test.csv", dir.path()).status == 0);
  }
  CHECK(read_text(dir / "run/weights.safetensors") == weights);
  // A resume refused by the lock of a directory that had none leaves none behind.
  fs::remove(dir / "run/tensorctl.lock");
  expect_user_error(dir, "train " + kIris + " --epochs 2 --resume run --batch-size 7", {"run", "batch_size"});
  CHECK(!fs::exists(dir / "run/tensorctl.lock"));
  CHECK(run_tensorctl("train " + kIris + " --epochs 2 --resume run --quiet", dir.path()).status == 0);
}

TEST_CASE("two trains into one directory at once: one run, whole, never a mix of the two") {
  // Before the lock, 3 tries in 8 left one model's model.json beside the other's weights, both exiting 0.
  TempDir dir;
  dir.write("wide.json", R"({"model": {"name": "wide", "input_shape": [4], "layers": [{"type": "Dense", "units": 64,
    "activation": "relu"}, {"type": "Dense", "units": 3}]}, "data": "iris", "epochs": 40})");
  dir.write("narrow.json",
            R"({"model": {"name": "narrow", "input_shape": [4], "layers": [{"type": "Dense", "units": 3}]},
    "data": "iris", "epochs": 40})");
  for (int attempt = 0; attempt < 4; ++attempt) {
    CAPTURE(attempt);
    const pid_t a = spawn_tensorctl("train wide.json --output run --overwrite --quiet", dir, "a");
    const pid_t b = spawn_tensorctl("train narrow.json --output run --overwrite --quiet", dir, "b");
    const int status_a = wait_exit(a), status_b = wait_exit(b);
    const std::string err_a = read_text(dir / "a.err"), err_b = read_text(dir / "b.err");
    INFO(err_a << err_b);
    for (const auto& [status, err] : {std::pair{status_a, err_a}, std::pair{status_b, err_b}}) {
      CHECK((status == 0 || status == 2));
      if (status == 2) CHECK(err.find("error: run: another tensorctl process") != std::string::npos);
    }
    CHECK((status_a == 0 || status_b == 0));
    // Whatever won, the directory is one run: its model, summary and weights agree, and predict reads them.
    const std::string name = read_json(dir / "run/model.json").at("name");
    CHECK(read_json(dir / "run/summary.json").at("model") == name);
    CHECK(run_tensorctl("predict --run run --input run/test.csv", dir.path()).status == 0);
  }
}

TEST_CASE("two resumes of one run at once, and a predict beside a train: each waits its turn or is refused") {
  TempDir dir;
  REQUIRE(run_tensorctl("train " + kIris + " --epochs 2 --output run --quiet", dir.path()).status == 0);
  // Both resumed to 60 epochs once: summary.json said epochs_run 120, epochs 60.
  const pid_t a = spawn_tensorctl("train " + kIris + " --epochs 60 --resume run --quiet", dir, "a");
  const pid_t b = spawn_tensorctl("train " + kIris + " --epochs 60 --resume run --quiet", dir, "b");
  const int status_a = wait_exit(a), status_b = wait_exit(b);
  INFO(read_text(dir / "a.err") << read_text(dir / "b.err"));
  CHECK((status_a == 0 || status_a == 2));
  CHECK((status_b == 0 || status_b == 2));
  const nlohmann::json summary = read_json(dir / "run/summary.json");
  CHECK(summary.at("epochs_run") == 60);
  CHECK(split_lines(read_text(dir / "run/history.csv")).size() == 61);

  const pid_t train = spawn_tensorctl("train " + kIris + " --epochs 300 --output run --overwrite --quiet", dir, "t");
  for (int i = 0; i < 20; ++i) {
    const CommandResult r =
        run_tensorctl("predict --run run --input " + quoted(source_path("configs/data/iris.csv")), dir.path());
    // A whole run read, or a refusal naming the writer; never another run's weights under this model.
    CHECK((r.status == 0 || r.status == 2));
    if (r.status == 2) CHECK(r.err.find("is writing this run directory") != std::string::npos);
  }
  CHECK(wait_exit(train) == 0);
}

TEST_CASE("a directory holding only the temporaries of killed processes is an empty run; a writer removes them") {
  TempDir dir;
  // kill -9 during the very first write left model.json.tmp.PID.0 alone, and train, --overwrite and --resume
  // all refused the directory.
  const std::string stale = "model.json.tmp." + std::to_string(dead_pid()) + ".0";
  dir.write("run/" + stale, "{\"half\": ");
  CHECK(run_tensorctl("train " + kIris + " --epochs 1 --output run --quiet", dir.path()).status == 0);
  CHECK(!fs::exists(dir / "run" / stale));
  // After a resume, the temporaries of a killed process are gone; a live process's stays (it may be writing).
  const std::string killed = "checkpoint.safetensors.tmp." + std::to_string(dead_pid()) + ".3";
  const std::string live = "history.csv.tmp." + std::to_string(::getpid()) + ".1";
  dir.write("run/" + killed, "partial");
  dir.write("run/" + live, "partial");
  CHECK(run_tensorctl("train " + kIris + " --epochs 2 --resume run --quiet", dir.path()).status == 0);
  CHECK(!fs::exists(dir / "run" / killed));
  CHECK(fs::exists(dir / "run" / live));
  // --overwrite of a directory holding the stale file alone works too.
  fs::remove_all(dir / "run");
  dir.write("run/" + stale, "{");
  CHECK(run_tensorctl("train " + kIris + " --epochs 1 --output run --overwrite --quiet", dir.path()).status == 0);
  CHECK(fs::exists(dir / "run/weights.safetensors"));
}
