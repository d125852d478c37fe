// Checkpoints and resume end to end: a resumed run is bit-identical to one that never stopped, Ctrl-C
// writes a checkpoint and exits 130, a killed process never leaves an unreadable checkpoint, a checkpoint
// that cannot be written leaves the previous one whole, a resume that would change the run is refused, and
// the callbacks act on the monitored values.
#include <doctest/doctest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <random>
#include <thread>
#include <tuple>

#include "cli/cli_test_util.h"
#include "core/errors.h"
#include "models/io/safetensors.h"

using namespace tctl::cli_test;
namespace fs = std::filesystem;

extern char** environ;

namespace {

// Starts `tensorctl ARGS` in `dir` without waiting; stdout and stderr go to out.txt and err.txt there.
pid_t spawn_tensorctl(const std::string& args, const TempDir& dir) {
  return tctl::cli_test::spawn_tensorctl(args, dir.path(), dir / "out.txt", dir / "err.txt");
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

// `tensorctl ARGS` in `dir`, sent `signal` once its run directory `run` has the first epoch's history (so the
// signal lands while training runs); its exit status and output.
struct Signalled {
  int status;
  std::string out, err;
};
Signalled signal_training(const std::string& args, const TempDir& dir, int signal) {
  const pid_t pid = spawn_tensorctl(args, dir);
  REQUIRE(wait_for(dir / "run/history.csv"));
  kill(pid, signal);
  const int status = wait_exit(pid);
  return {status, read_text(dir / "out.txt"), read_text(dir / "err.txt")};
}

// Limits the size of every file the commands started while it lives may write, as `ulimit -f` does:
// a write past it fails with EFBIG (tensorctl ignores SIGXFSZ, which would otherwise end it).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(getrlimit(RLIMIT_FSIZE, &previous_) == 0);
    rlimit limited = previous_;
    limited.rlim_cur = bytes;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &limited) == 0);
  }
  ~FileSizeLimit() { setrlimit(RLIMIT_FSIZE, &previous_); }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit previous_{};
};

// The lines of a run's history.csv without the seconds column, which differs from run to run.
std::vector<std::string> history_rows(const fs::path& run) {
  std::vector<std::string> out;
  for (const auto& line : split_lines(read_text(run / "history.csv"))) out.push_back(line.substr(0, line.rfind(',')));
  return out;
}

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
  CHECK(history_rows(dir / "straight").size() == 5);
  CHECK(history_rows(dir / "straight") == history_rows(dir / "resumed"));
  // Resuming a finished run trains nothing more, and to fewer epochs rewrites nothing: its summary said
  // "epochs 2, epochs_run 4" after `--resume --epochs 2`.
  const std::string summary = read_text(dir / "resumed/summary.json");
  const std::string history = read_text(dir / "resumed/history.csv");
  for (const char* epochs : {"4", "2"}) {
    r = run_tensorctl("train " + kDigits + " --epochs " + epochs + " --resume resumed", dir.path());
    REQUIRE(r.status == 0);
    CHECK(r.out.find("no more epochs (the run had already trained 4)") != std::string::npos);
    CHECK(read_text(dir / "resumed/summary.json") == summary);
    CHECK(read_text(dir / "resumed/history.csv") == history);
  }
}

TEST_CASE(
    "Ctrl-C finishes the step, writes a checkpoint, says how to resume and exits 130; resuming matches a straight "
    "run") {
  TempDir dir;
  // The config under a name the shell must have quoted, and overrides the printed command has to repeat.
  fs::copy(source_path("configs/digits_mlp.json"), dir / "my digits.json");
  // 100 epochs take most of a second, so the signal sent after the first one always lands while training runs.
  const std::string run = " --epochs 100 --batch-size 16 --seed 5 --set optimizer.learning_rate=0.002";
  dir.write("models/digits_mlp.json", read_text(source_path("configs/models/digits_mlp.json")));
  REQUIRE(run_tensorctl("train 'my digits.json'" + run + " --output straight --quiet", dir.path()).status == 0);
  const auto [status, out, err] =
      signal_training("train 'my digits.json'" + run + " --output run --quiet", dir, SIGINT);
  INFO(out << err);
  // Exit 0 would mean training finished before the signal arrived, and the case below went untested: a failure.
  REQUIRE(status == 130);
  CHECK(out.find("Interrupted: epoch ") != std::string::npos);
  const std::string advice = "Resume with: tensorctl ";
  const std::size_t at = out.find(advice);
  REQUIRE(at != std::string::npos);
  const std::string command = out.substr(at + advice.size(), out.find('\n', at) - at - advice.size());
  CHECK(command == "train 'my digits.json' --resume run" + run + " --quiet");
  CHECK(fs::exists(dir / "run/checkpoint.safetensors"));
  CHECK(!fs::exists(dir / "run/weights.safetensors"));
  // Following the advice gives the run that never stopped: the same weights, and every epoch's row the same
  // (the interrupted epoch's too, whether the signal landed inside it or between epochs).
  CommandResult r = run_tensorctl(command, dir.path());
  REQUIRE(r.status == 0);
  CHECK(read_text(dir / "straight/weights.safetensors") == read_text(dir / "run/weights.safetensors"));
  CHECK(history_rows(dir / "straight") == history_rows(dir / "run"));
}

TEST_CASE("SIGTERM and SIGHUP stop training as Ctrl-C does, and exit 143 and 129 saying so; the run resumes") {
  // SIGHUP (a closed terminal, a dropped ssh session) ended the process with 129 and no checkpoint.
  for (const auto& [signal, status_wanted, said] : {std::tuple{SIGTERM, 143, "Terminated (SIGTERM): epoch "},
                                                    std::tuple{SIGHUP, 129, "Hung up (SIGHUP): epoch "}}) {
    CAPTURE(said);
    TempDir dir;
    const auto [status, out, err] =
        signal_training("train " + kDigits + " --epochs 300 --output run --quiet", dir, signal);
    INFO(out << err);
    REQUIRE(status == status_wanted);
    CHECK(out.find(said) != std::string::npos);
    CHECK(out.find("Resume with: tensorctl train ") != std::string::npos);
    CHECK(fs::exists(dir / "run/checkpoint.safetensors"));
    CHECK(!fs::exists(dir / "run/weights.safetensors"));
    CHECK(run_tensorctl("train " + kDigits + " --epochs 300 --resume run --quiet", dir.path()).status == 0);
    CHECK(fs::exists(dir / "run/weights.safetensors"));
  }
}

TEST_CASE("the history is appended to history.csv: a checkpoint's size stays flat, and a resume keeps its rows") {
  TempDir dir;
  const std::string iris = quoted(source_path("configs/iris_mlp.json"));
  REQUIRE(run_tensorctl("train " + iris + " --epochs 2 --output short --quiet", dir.path()).status == 0);
  REQUIRE(run_tensorctl("train " + iris + " --epochs 3000 --output long --quiet", dir.path()).status == 0);
  // Every row in every checkpoint made the I/O quadratic: 26 MB after 18 s of --epochs 99999999999.
  const auto short_size = fs::file_size(dir / "short/checkpoint.safetensors");
  const auto long_size = fs::file_size(dir / "long/checkpoint.safetensors");
  CHECK(long_size < short_size + 64);
  const auto rows = split_lines(read_text(dir / "long/history.csv"));
  REQUIRE(rows.size() == 3001);
  CHECK(rows[3000].starts_with("3000,"));
  CHECK(read_json(dir / "long/summary.json").at("epochs_run") == 3000);

  // Rows past the checkpoint (epochs that ended after it was written) are dropped by a resume, which trains
  // those epochs again.
  std::ofstream(dir / "short/history.csv", std::ios::app) << "3,9,9,9,9,0.0010\n4,9,9";
  REQUIRE(run_tensorctl("train " + iris + " --epochs 4 --resume short --quiet", dir.path()).status == 0);
  REQUIRE(run_tensorctl("train " + iris + " --epochs 4 --output straight --quiet", dir.path()).status == 0);
  CHECK(history_rows(dir / "short") == history_rows(dir / "straight"));
  // A history.csv that lost the checkpoint's rows is refused: the run's history would be wrong.
  fs::remove(dir / "short/summary.json");
  std::ofstream(dir / "short/history.csv", std::ios::trunc)
      << split_lines(read_text(dir / "straight/history.csv"))[0] << "\n";
  expect_user_error(
      dir, "train " + iris + " --epochs 5 --resume short",
      {"short/history.csv: line 2: cannot resume: it holds 0 epochs' rows, where the checkpoint continues after "
       "epoch 4"});
  // A row that is not its epoch's.
  std::vector<std::string> lines = split_lines(read_text(dir / "straight/history.csv"));
  lines[2] = "2,oops";
  std::string damaged;
  for (const std::string& line : lines) damaged += line + "\n";
  std::ofstream(dir / "short/history.csv", std::ios::trunc) << damaged;
  expect_user_error(
      dir, "train " + iris + " --epochs 5 --resume short",
      {"short/history.csv: line 3: cannot resume: expected the row of epoch 2 (6 cells), got \"2,oops\""});
}

TEST_CASE("a process killed at random points never leaves an unreadable checkpoint") {
  TempDir dir;
  // A checkpoint after every 1.5 ms epoch, so the kills land in and between many writes.
  nlohmann::json config = nlohmann::json::parse(read_text(source_path("configs/digits_mlp.json")));
  config["model"] = source_path("configs/models/digits_mlp.json").string();
  config["checkpoint_seconds"] = 0;
  dir.write("every.json", config.dump());
  std::mt19937 rng(12345);
  int checked = 0;
  for (int attempt = 0; attempt < 8; ++attempt) {
    const pid_t pid = spawn_tensorctl("train every.json --epochs 400 --output run --overwrite --quiet", dir);
    if (attempt == 0) REQUIRE(wait_for(dir / "run/checkpoint.safetensors"));
    std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 150000)(rng)));
    kill(pid, SIGKILL);
    wait_exit(pid);
    const fs::path ckpt = dir / "run/checkpoint.safetensors";
    if (!fs::exists(ckpt)) continue;
    ++checked;
    CHECK_NOTHROW(tctl::load_safetensors(ckpt));
    // And the run continues from it (a few more epochs, to keep the test short).
    CommandResult r = run_tensorctl("train every.json --epochs 1 --resume run --quiet", dir.path());
    CHECK(r.status == 0);
  }
  CHECK(checked > 0);
}

TEST_CASE("a checkpoint write that fails (file too large) exits 1 naming the file; the previous checkpoint resumes") {
  TempDir dir;
  REQUIRE(run_tensorctl("train " + kDigits + " --epochs 1 --output run --quiet", dir.path()).status == 0);
  const std::string before = read_text(dir / "run/checkpoint.safetensors");
  // Room for model.json (under 1 KB), not for the checkpoint (about 200 KB) after epoch 2.
  REQUIRE(before.size() > 64 * 1024);
  CommandResult r;
  {
    FileSizeLimit limit(64 * 1024);
    r = run_tensorctl("train " + kDigits + " --epochs 3 --resume run --quiet", dir.path());
  }
  check_runtime_error(r, {"run/checkpoint.safetensors", "File too large"});
  CHECK(read_text(dir / "run/checkpoint.safetensors") == before);
  for (const auto& e : fs::directory_iterator(dir / "run"))
    CHECK_MESSAGE(e.path().filename().string().find(".tmp.") == std::string::npos, "left behind: " << e.path());

  // Without the limit the run continues from epoch 2 to the end, as if nothing had happened.
  r = run_tensorctl("train " + kDigits + " --epochs 3 --resume run", dir.path());
  REQUIRE(r.status == 0);
  CHECK(r.out.find("epochs 2-3 (resumed)") != std::string::npos);
  REQUIRE(run_tensorctl("train " + kDigits + " --epochs 3 --output straight --quiet", dir.path()).status == 0);
  CHECK(read_text(dir / "run/weights.safetensors") == read_text(dir / "straight/weights.safetensors"));
  CHECK(history_rows(dir / "run") == history_rows(dir / "straight"));
}

TEST_CASE("checkpoint_seconds spaces the end-of-epoch checkpoints; the first and the last epoch always get one") {
  TempDir dir;
  const std::string model = source_path("configs/models/digits_mlp.json").string();
  auto config = [&](const std::string& seconds, const std::string& extra) {
    return R"({"model": ")" + model + R"(", "data": {"dataset": "digits"}, "epochs": 4, "seed": 42,
               "checkpoint_seconds": )" +
           seconds + extra + "}";
  };
  // A learning rate multiplied by 1e36 after 2 epochs (41 steps each) blows up in epoch 3: what stays is the
  // last checkpoint written, with the history beside it.
  const std::string blow_up =
      R"(, "optimizer": {"type": "sgd", "schedule": {"type": "step", "step_size": 82, "gamma": 1e36}})";
  dir.write("every.json", config("0", blow_up));
  dir.write("seldom.json", config("1e6", blow_up));
  check_runtime_error(run_tensorctl("train every.json --output every --quiet", dir.path()), {"epoch 3, step "});
  check_runtime_error(run_tensorctl("train seldom.json --output seldom --quiet", dir.path()), {"epoch 3, step "});
  CHECK(history_rows(dir / "every").size() == 3);   // the header and epochs 1 and 2
  CHECK(history_rows(dir / "seldom").size() == 2);  // the header and the first epoch
  // A run stopped by a callback writes the checkpoint of its last epoch before the best weights go back:
  // EarlyStopping with a min_delta nothing meets stops after epoch 2 and restores epoch 1's weights.
  // Resumed to epoch 4, it ends as the same run checkpointed after every epoch does.
  const std::string stop = R"(, "callbacks": [{"type": "EarlyStopping", "monitor": "val_loss", "min_delta": 1000,
                                                "restore_best_weights": true}])";
  dir.write("stop.json", config("1e6", stop));
  dir.write("stop_every.json", config("0", stop));
  REQUIRE(run_tensorctl("train stop.json --output stop --quiet", dir.path()).status == 0);
  REQUIRE(run_tensorctl("train stop_every.json --output stop_every --quiet", dir.path()).status == 0);
  CommandResult r = run_tensorctl("train stop.json --resume stop --epochs 4", dir.path());
  REQUIRE(r.status == 0);
  CHECK(r.out.find("epochs 3-") != std::string::npos);
  REQUIRE(run_tensorctl("train stop_every.json --resume stop_every --epochs 4 --quiet", dir.path()).status == 0);
  CHECK(read_text(dir / "stop/weights.safetensors") == read_text(dir / "stop_every/weights.safetensors"));
  CHECK(history_rows(dir / "stop") == history_rows(dir / "stop_every"));
  // The last epoch of a run that reaches its end: 3 epochs, resumed to 4, as 4 straight.
  dir.write("plain.json", config("1e6", ""));
  REQUIRE(run_tensorctl("train plain.json --epochs 3 --output part --quiet", dir.path()).status == 0);
  r = run_tensorctl("train plain.json --resume part", dir.path());
  REQUIRE(r.status == 0);
  CHECK(r.out.find("epochs 4-4 (resumed)") != std::string::npos);
  REQUIRE(run_tensorctl("train plain.json --output straight --quiet", dir.path()).status == 0);
  CHECK(read_text(dir / "part/weights.safetensors") == read_text(dir / "straight/weights.safetensors"));
}

TEST_CASE("EarlyStopping stops and restores the best weights; ModelCheckpoint saves the best epoch") {
  TempDir dir;
  // min_delta so large that nothing after the first epoch counts as better: with patience 1, Keras stops at
  // the first epoch that does not improve (wait >= patience), epoch 2, and restoring the best weights gives
  // exactly the weights of a one-epoch run.
  dir.write("early.json", R"({"model": ")" + source_path("configs/models/digits_mlp.json").string() + R"(",
    "data": {"dataset": "digits"}, "epochs": 10, "seed": 42,
    "callbacks": [{"type": "EarlyStopping", "monitor": "val_loss", "patience": 1, "min_delta": 1000, "restore_best_weights": true},
                  {"type": "ModelCheckpoint", "monitor": "val_accuracy"}]})");
  CommandResult r = run_tensorctl("train early.json --output early", dir.path());
  REQUIRE(r.status == 0);
  CHECK(r.out.find("EarlyStopping: val_loss has not improved for 1 epoch (best") != std::string::npos);
  CHECK(r.out.find("EarlyStopping: restored the weights of epoch 1") != std::string::npos);
  CHECK(r.out.find("ModelCheckpoint: val_accuracy improved") != std::string::npos);
  CHECK(split_lines(read_text(dir / "early/history.csv")).size() == 3);  // header + epochs 1..2
  REQUIRE(run_tensorctl("train early.json --epochs 1 --output one --quiet", dir.path()).status == 0);
  CHECK(read_text(dir / "early/weights.safetensors") == read_text(dir / "one/weights.safetensors"));
  const auto best = tctl::load_safetensors(dir / "early/best.safetensors");
  CHECK(best.metadata.at("monitor") == "val_accuracy");
}

TEST_SUITE("bad input") {
  TEST_CASE("resume refuses a config change that alters the results, naming the key and both values, writing nothing") {
    TempDir dir;
    const std::string model = source_path("configs/models/digits_mlp.json").string();
    // The shipped config, spelled out here so one key at a time can change.
    auto config = [&](const std::string& extra) {
      return R"({"model": ")" + model + R"(", "data": {"dataset": "digits", "test_split": 0.2, "validation_split": 0.1},
      "optimizer": {"type": "adam", "learning_rate": 0.001}, "epochs": 4, "seed": 42)" +
             extra + "}";
    };
    dir.write("base.json", config(""));
    REQUIRE(run_tensorctl("train base.json --epochs 1 --output run --quiet", dir.path()).status == 0);
    const std::string checkpoint = read_text(dir / "run/checkpoint.safetensors");
    expect_user_error(dir, "train base.json --resume run --batch-size 64",
                      {"base.json: batch_size: cannot resume run", "with 32, this run has 64"});
    expect_user_error(dir, "train base.json --resume run --seed 7", {"seed", "with 42, this run has 7"});
    expect_user_error(dir, "train base.json --resume run --keep-denormals",
                      {"keep_denormals", "with false, this run has true"});
    expect_user_error(dir, "train base.json --resume run --device cuda", {"device", "\"cpu\"", "\"cuda\""});
    dir.write("lr.json", config("").replace(config("").find("0.001"), 5, "0.002"));
    expect_user_error(dir, "train lr.json --resume run",
                      {"lr.json: optimizer.learning_rate", "with 0.001, this run has 0.002"});
    dir.write("loss.json", config(R"(, "loss": "categorical_crossentropy")"));
    expect_user_error(dir, "train loss.json --resume run",
                      {"loss", "\"sparse_categorical_crossentropy\"", "\"categorical_crossentropy\""});
    dir.write("split.json", config("").replace(config("").find("0.2"), 3, "0.3"));
    expect_user_error(dir, "train split.json --resume run", {"data.test_split", "with 0.2, this run has 0.3"});
    dir.write("cb.json", config(R"(, "callbacks": [{"type": "EarlyStopping", "monitor": "val_loss", "patience": 3}])"));
    expect_user_error(dir, "train cb.json --resume run", {"callbacks", "a list of 0", "a list of 1"});
    dir.write("inline.json",
              R"({"model": {"input_shape": [64], "layers": [{"type": "Dense", "units": 10, "activation": "softmax"}]},
    "data": "digits", "seed": 42})");
    expect_user_error(dir, "train inline.json --resume run", {"inline.json: "});
    CHECK(read_text(dir / "run/checkpoint.safetensors") == checkpoint);
    // What changes no result may change: epochs, the thread counts, prefetch, the checkpoints' spacing, and
    // where the config lives.
    dir.write("sub/prefetch.json",
              config(R"(, "prefetch": 0, "checkpoint_seconds": 0, "threads": {"inter_op": 1, "intra_op": 1})"));
    REQUIRE(run_tensorctl("train sub/prefetch.json --resume run --epochs 2 --inter-op-threads 2 --quiet", dir.path())
                .status == 0);
    REQUIRE(run_tensorctl("train base.json --epochs 2 --output straight --quiet", dir.path()).status == 0);
    CHECK(read_text(dir / "run/weights.safetensors") == read_text(dir / "straight/weights.safetensors"));
  }

  TEST_CASE("resume refuses what is not a run of this model, and bad callbacks, writing nothing") {
    TempDir dir;
    dir.write("empty/readme.txt", "not a run");
    expect_user_error(dir, "train " + kDigits + " --resume empty",
                      {"empty", "not a run directory (checkpoint.safetensors is missing)"});
    expect_user_error(dir, "train " + kDigits + " --resume missing", {"missing", "the run directory does not exist"});
    expect_user_error(dir, "train " + kDigits + " --resume x --output y", {"--output"});
    REQUIRE(run_tensorctl("train " + quoted(source_path("configs/iris_mlp.json")) + " --epochs 1 --output iris --quiet",
                          dir.path())
                .status == 0);
    expect_user_error(dir, "train " + kDigits + " --resume iris", {"digits_mlp.json: model.", "cannot resume iris"});
    // A truncated checkpoint is refused, never a crash.
    const std::string bytes = read_text(dir / "iris/checkpoint.safetensors");
    dir.write("iris/checkpoint.safetensors", bytes.substr(0, bytes.size() / 2));
    expect_user_error(dir, "train " + quoted(source_path("configs/iris_mlp.json")) + " --resume iris",
                      {"checkpoint.safetensors"});
    dir.write("cb.json", R"({"model": ")" + source_path("configs/models/iris_mlp.json").string() +
                             R"(", "data": {"dataset": "iris"},
    "callbacks": [{"type": "EarlyStopping", "monitor": "val_los"}]})");
    expect_user_error(dir, "train cb.json", {"cb.json", "callbacks[0].monitor", "unknown quantity \"val_los\""});
    dir.write("cb2.json", R"({"model": ")" + source_path("configs/models/iris_mlp.json").string() +
                              R"(", "data": {"dataset": "iris"},
    "callbacks": [{"type": "ReduceLROnPlateau", "factor": 1.5}]})");
    expect_user_error(dir, "train cb2.json", {"cb2.json", "callbacks[0].factor"});
  }

  TEST_CASE("a callback monitors only loss and the config's metrics, their val_ forms with validation data") {
    TempDir dir;
    auto config = [&](const std::string& name, const std::string& callbacks, const std::string& more = "",
                      const std::string& data = R"({"dataset": "iris"})") {
      dir.write(name, R"({"model": ")" + source_path("configs/models/iris_mlp.json").string() + R"(", "data": )" +
                          data + R"(, "epochs": 3, "callbacks": [)" + callbacks + "]" + more + "}");
    };
    // iris_mlp's metrics are ["accuracy"]: mae, val_mse and top_k_accuracy were monitored as 0 every epoch.
    const std::string can = "this run can monitor loss, accuracy, val_loss, val_accuracy";
    config("mae.json", R"({"type": "EarlyStopping", "monitor": "mae"})");
    expect_user_error(dir, "train mae.json",
                      {"mae.json: callbacks[0].monitor: \"mae\" is not computed: mae is not among the config's "
                       "metrics (accuracy); " +
                       can});
    config("val_mse.json", R"({"type": "ReduceLROnPlateau", "monitor": "val_mse"})");
    expect_user_error(dir, "train val_mse.json", {"callbacks[0].monitor: \"val_mse\" is not computed", can});
    config("top_k.json", R"({"type": "EarlyStopping", "monitor": "top_k_accuracy"})");
    expect_user_error(dir, "train top_k.json", {"callbacks[0].monitor: \"top_k_accuracy\" is not computed", can});
    config("best.json", R"({"type": "TensorBoard"}, {"type": "ModelCheckpoint", "monitor": "val_mae"})");
    expect_user_error(dir, "train best.json", {"callbacks[1].monitor: \"val_mae\" is not computed", can});
    config("typo.json", R"({"type": "EarlyStopping", "monitor": "val_los"})");
    expect_user_error(dir, "train typo.json", {"callbacks[0].monitor: unknown quantity \"val_los\"; " + can});
    config("noval.json", R"({"type": "EarlyStopping", "monitor": "mae"})", "",
           R"({"dataset": "iris", "validation_split": 0})");
    const CommandResult noval =
        expect_user_error(dir, "train noval.json", {"callbacks[0].monitor", "this run can monitor loss, accuracy"});
    CHECK(noval.err.find("val_") == std::string::npos);
    // A validation_split that rounds to no row (0.001 of iris' 120 rows left after the test split): val_loss
    // read as 0 every epoch, and EarlyStopping restored epoch 1's weights.
    for (const char* type : {"EarlyStopping", "ModelCheckpoint", "ReduceLROnPlateau"}) {
      config("tiny.json", std::string(R"({"type": ")") + type + R"("})", "",
             R"({"dataset": "iris", "validation_split": 0.001})");
      expect_user_error(dir, "train tiny.json --output tiny",
                        {"tiny.json: callbacks[0].monitor: val_loss needs validation data, but "
                         "data.validation_split 0.001 of the 120 rows left after the test split rounds to 0 rows"});
    }
    config("tiny.json", R"({"type": "EarlyStopping", "monitor": "loss"})", "",
           R"({"dataset": "iris", "validation_split": 0.001})");
    CHECK(run_tensorctl("train tiny.json --output tiny --quiet", dir.path()).status == 0);
    // A regression computes no accuracy.
    nlohmann::json diabetes = read_json(source_path("configs/diabetes_regression.json"));
    diabetes["model"] = source_path("configs/models/diabetes_mlp.json").string();
    diabetes["data"]["csv"] = source_path("configs/data/diabetes.csv").string();
    diabetes["callbacks"] = {{{"type", "EarlyStopping"}, {"monitor", "accuracy"}}};
    dir.write("regression.json", diabetes.dump());
    expect_user_error(dir, "train regression.json",
                      {"callbacks[0].monitor: \"accuracy\" is not computed: accuracy is not among the config's "
                       "metrics (mae, mse); this run can monitor loss, mae, mse, val_loss, val_mae, val_mse"});
    // Among the metrics, it is monitored.
    config("ok.json", R"({"type": "EarlyStopping", "monitor": "val_top_k_accuracy", "patience": 5})",
           R"(, "metrics": ["accuracy", "top_k_accuracy"])");
    CHECK(run_tensorctl("train ok.json --output ok --quiet", dir.path()).status == 0);
    // A run recorded before the check, with such a monitor, still loads for predict.
    nlohmann::json summary = read_json(dir / "ok/summary.json");
    summary["config"]["metrics"] = {"accuracy"};
    dir.write("ok/summary.json", summary.dump());
    CHECK(run_tensorctl("predict --run ok --input ok/test.csv", dir.path()).status == 0);
  }
}

TEST_SUITE("bad input") {
  TEST_CASE("resume refuses data that changed since the checkpoint, naming the source and what changed") {
    TempDir dir;
    const std::string wine = read_text(source_path("configs/data/wine.csv"));
    dir.write("mywine.csv", wine);
    dir.write("w.json", R"({"model": ")" + source_path("configs/models/wine_mlp.json").string() +
                            R"(", "data": {"csv": "mywine.csv"}, "epochs": 4})");
    REQUIRE(run_tensorctl("train w.json --epochs 2 --output rw --quiet", dir.path()).status == 0);
    const std::string checkpoint = read_text(dir / "rw/checkpoint.safetensors");
    // The sweep's reproducer: the same path, its first 59 rows.
    const std::vector<std::string> lines = split_lines(wine);
    std::string head;
    for (std::size_t i = 0; i < 60; ++i) head += lines[i] + "\n";
    dir.write("mywine.csv", head);
    expect_user_error(dir, "train w.json --resume rw",
                      {"w.json: data.csv: cannot resume rw: mywine.csv holds 59 rows, where the data its checkpoint "
                       "was trained on held 178; a resumed run trains on the same data"});
    // As many rows, one value changed (the first row's alcohol, 14.23).
    std::string changed = wine;
    changed.replace(changed.find("14.23"), 5, "14.24");
    dir.write("mywine.csv", changed);
    expect_user_error(dir, "train w.json --resume rw",
                      {"w.json: data.csv: cannot resume rw: mywine.csv has changed since its checkpoint was written: "
                       "the rows' values differ"});
    // The same values under two header names swapped: predict would feed each to the other's input.
    const std::string header = lines[0];
    std::string swapped = wine;
    swapped.replace(0, header.size(), "malic_acid,alcohol" + header.substr(std::string("alcohol,malic_acid").size()));
    REQUIRE(header.starts_with("alcohol,malic_acid,"));
    dir.write("mywine.csv", swapped);
    expect_user_error(dir, "train w.json --resume rw",
                      {"w.json: data.csv: cannot resume rw: mywine.csv has changed since its checkpoint was written: "
                       "its columns are named \"malic_acid\", \"alcohol\",",
                       "where they were \"alcohol\", \"malic_acid\","});
    CHECK(read_text(dir / "rw/checkpoint.safetensors") == checkpoint);
    // The same bytes again resume, to the bits of a run that never stopped.
    dir.write("mywine.csv", wine);
    REQUIRE(run_tensorctl("train w.json --resume rw --quiet", dir.path()).status == 0);
    REQUIRE(run_tensorctl("train w.json --output straight --quiet", dir.path()).status == 0);
    CHECK(read_text(dir / "rw/weights.safetensors") == read_text(dir / "straight/weights.safetensors"));

    // A built-in dataset is checked the same way: iris read from another TENSORCTL_DATA_DIR.
    const std::string iris = quoted(source_path("configs/iris_mlp.json"));
    REQUIRE(run_tensorctl("train " + iris + " --epochs 1 --output ri --quiet", dir.path()).status == 0);
    std::string other = read_text(source_path("configs/data/iris.csv"));
    other.replace(other.find("5.1,"), 4, "5.2,");
    dir.write("data/iris.csv", other);
    {
      ScopedEnv data_dir("TENSORCTL_DATA_DIR", (dir / "data").string());
      expect_user_error(dir, "train " + iris + " --resume ri --epochs 2",
                        {"iris_mlp.json: data: cannot resume ri: dataset iris has changed since its checkpoint was "
                         "written: the rows' values differ"});
    }
    CHECK(run_tensorctl("train " + iris + " --resume ri --epochs 2 --quiet", dir.path()).status == 0);
  }

  TEST_CASE("a checkpoint written before the data was recorded still resumes") {
    TempDir dir;
    const std::string iris = quoted(source_path("configs/iris_mlp.json"));
    REQUIRE(run_tensorctl("train " + iris + " --epochs 1 --output run --quiet", dir.path()).status == 0);
    const fs::path checkpoint = dir / "run/checkpoint.safetensors";
    tctl::SafetensorsFile file = tctl::load_safetensors(checkpoint);
    REQUIRE(file.metadata.count("data") == 1);
    REQUIRE(file.metadata.count("inputs") == 1);
    file.metadata.erase("data");
    file.metadata.erase("inputs");
    tctl::save_safetensors(checkpoint, file.tensors, file.metadata);
    REQUIRE(run_tensorctl("train " + iris + " --resume run --epochs 2 --quiet", dir.path()).status == 0);
    REQUIRE(run_tensorctl("train " + iris + " --epochs 2 --output straight --quiet", dir.path()).status == 0);
    CHECK(read_text(dir / "run/weights.safetensors") == read_text(dir / "straight/weights.safetensors"));
  }
}

// Dynamic loss scaling's state (mixed_float16): a scale from 1 to 2^126 (UpdateLossScale's range), whole counts,
// the good steps below the growth interval (reaching it doubles the scale and starts them again at 0).
TEST_CASE("resume refuses a checkpoint whose loss-scale state training could not have written") {
  TempDir dir;
  const std::string train = "train " + quoted(source_path("configs/iris_mlp.json")) + " --precision mixed_float16 ";
  REQUIRE(run_tensorctl(train + "--epochs 2 --output run --quiet", dir.path()).status == 0);
  const fs::path checkpoint = dir / "run/checkpoint.safetensors";
  const tctl::SafetensorsFile original = tctl::load_safetensors(checkpoint);
  auto refused = [&](const std::string& tensor, float v, const std::string& needle) {
    tctl::SafetensorsFile file = original;
    bool found = false;
    for (auto& t : file.tensors) {
      t.value = t.value.clone();
      if (t.name == tensor) found = true, t.value.mutable_data<float>()[0] = v;
    }
    REQUIRE(found);
    tctl::save_safetensors(checkpoint, file.tensors, file.metadata);
    expect_user_error(dir, train + "--resume run --epochs 3",
                      {"run/checkpoint.safetensors", "tensor \"" + tensor + "\"", needle});
  };
  refused("optimizer/loss_scale", 0.5f, "damaged training state: 0.5 (a loss scale from 1 to 2^126)");
  refused("optimizer/loss_scale", 0x1p127f, "(a loss scale from 1 to 2^126)");
  refused("optimizer/loss_scale_good_steps", 2000.0f, "2000 steps (a whole number from 0 below 2000)");
  refused("optimizer/loss_scale_good_steps", 1.5f, "1.5 steps (a whole number from 0 below 2000)");
  refused("optimizer/skipped_steps", -1.0f, "-1 steps (a whole number from 0)");
  // The updates of an interrupted epoch that were skipped: a whole number, none before its first step.
  auto refused_meta = [&](const std::string& steps_done, const std::string& skipped, const std::string& needle) {
    std::map<std::string, std::string> meta = original.metadata;
    meta["steps_done"] = steps_done;
    meta["skipped_steps"] = skipped;
    tctl::save_safetensors(checkpoint, original.tensors, meta);
    expect_user_error(dir, train + "--resume run --epochs 3",
                      {"run/checkpoint.safetensors", "__metadata__.skipped_steps", needle});
  };
  refused_meta("0", "2", "damaged training state: 2 updates skipped before the epoch's first step");
  refused_meta("1", "-1", "expected a whole number, got \"-1\"");
  CHECK(original.metadata.at("skipped_steps") == "0");  // written whole epochs in: none pending
  tctl::save_safetensors(checkpoint, original.tensors, original.metadata);
  CHECK(run_tensorctl(train + "--resume run --epochs 3 --quiet", dir.path()).status == 0);
}

TEST_CASE("resume refuses a tampered checkpoint, naming the file and the tensor or key, writing nothing") {
  TempDir dir;
  const std::string iris = quoted(source_path("configs/iris_mlp.json"));
  REQUIRE(run_tensorctl("train " + iris + " --epochs 2 --output run --quiet", dir.path()).status == 0);
  const fs::path checkpoint = dir / "run/checkpoint.safetensors";
  const tctl::SafetensorsFile original = tctl::load_safetensors(checkpoint);
  // Writes the checkpoint again with one change, then expects the resume to be refused.
  auto refused = [&](auto change, const std::vector<std::string>& needles) {
    tctl::SafetensorsFile file = original;
    for (auto& t : file.tensors) t.value = t.value.clone();  // the original keeps its values
    change(file);
    tctl::save_safetensors(checkpoint, file.tensors, file.metadata);
    std::vector<std::string> all{"run/checkpoint.safetensors"};
    all.insert(all.end(), needles.begin(), needles.end());
    expect_user_error(dir, "train " + iris + " --resume run --epochs 3", all);
  };
  auto set = [](tctl::SafetensorsFile& f, const std::string& tensor, std::int64_t i, float v) {
    for (auto& t : f.tensors)
      if (t.name == tensor) t.value.mutable_data<float>()[i] = v;
  };
  refused([&](auto& f) { set(f, "dense/kernel", 0, std::nanf("")); }, {"tensor \"dense/kernel\"", "element 0 is nan"});
  refused([&](auto& f) { set(f, "optimizer/dense/kernel/v", 3, -1.0f); },
          {"tensor \"optimizer/dense/kernel/v\"", "element 3 is -1"});
  refused([&](auto& f) { set(f, "optimizer/iterations", 0, 2.5f); }, {"optimizer/iterations", "2.5 steps"});
  refused([&](auto& f) { set(f, "optimizer/learning_rate_factor", 0, 0.0f); }, {"optimizer/learning_rate_factor"});
  refused([](auto& f) { f.metadata["next_epoch"] = "1e9"; },
          {"__metadata__.next_epoch", "expected a whole number, got \"1e9\""});
  refused([](auto& f) { f.metadata["next_epoch"] = "1"; },
          {"__metadata__.history", "1 epochs recorded before epoch 1"});
  refused([](auto& f) { f.metadata["next_epoch"] = "4"; },
          {"__metadata__.history", "row 1 is epoch 2, where epoch 3 was expected"});
  refused([](auto& f) { f.metadata["data"] = R"({"rows": 150, "hash": "a fingerprint"})"; },
          {"__metadata__.data.hash: damaged training state: expected 16 hexadecimal digits"});
  // Converted to int64 with undefined behaviour, and a fraction truncated, before.
  auto history_with = [&](const char* key, double value) {
    nlohmann::json history = nlohmann::json::parse(original.metadata.at("history"));
    history[0][key] = value;
    return history.dump();
  };
  refused([&](auto& f) { f.metadata["history"] = history_with("epoch", 1e39); },
          {"__metadata__.history[0].epoch: damaged training state: expected a non-negative integer, got 1e+39"});
  refused([&](auto& f) { f.metadata["history"] = history_with("steps", 7.5); },
          {"__metadata__.history[0].steps: damaged training state: expected a non-negative integer, got 7.5"});
  refused(
      [&](auto& f) {
        nlohmann::json history = nlohmann::json::parse(original.metadata.at("history"));
        history[0]["epoch"] = 5;
        f.metadata["history"] = history.dump();
      },
      {"__metadata__.history: damaged training state: row 1 is epoch 5"});
  refused(
      [](auto& f) {
        f.metadata["steps_done"] = "1";
        f.metadata["partial_sums"] =
            R"({"abs_error":0,"correct":9,"examples":5,"loss":1,"sq_error":0,"top_k_correct":0,"values":0})";
      },
      {"__metadata__.partial_sums", "5 examples with 9 classified right"});
  // Sums a multi-output binary loss may round a hair past the count (it adds 1/width per output) still resume.
  std::map<std::string, std::string> rounded = original.metadata;
  rounded["steps_done"] = "1";
  rounded["partial_sums"] =
      R"({"abs_error":0,"correct":11.000000000000002,"examples":11,"loss":1,"sq_error":0,"top_k_correct":0,"values":0})";
  tctl::save_safetensors(checkpoint, original.tensors, rounded);
  CHECK(run_tensorctl("train " + iris + " --resume run --epochs 3 --quiet", dir.path()).status == 0);
  // Untouched, it resumes.
  tctl::save_safetensors(checkpoint, original.tensors, original.metadata);
  CHECK(run_tensorctl("train " + iris + " --resume run --epochs 3 --quiet", dir.path()).status == 0);
  // AdamW keeps Adam's slots, and the same check of its sums of squares.
  dir.write("adamw.json", R"({"model": ")" + source_path("configs/models/iris_mlp.json").string() +
                              R"(", "data": {"dataset": "iris"}, "optimizer": {"type": "adamw"}})");
  REQUIRE(run_tensorctl("train adamw.json --epochs 1 --output runw --quiet", dir.path()).status == 0);
  const fs::path adamw = dir / "runw/checkpoint.safetensors";
  tctl::SafetensorsFile file = tctl::load_safetensors(adamw);
  for (auto& t : file.tensors) t.value = t.value.clone();
  set(file, "optimizer/dense/kernel/v", 3, -1.0f);
  tctl::save_safetensors(adamw, file.tensors, file.metadata);
  expect_user_error(dir, "train adamw.json --resume runw --epochs 2",
                    {"runw/checkpoint.safetensors", "tensor \"optimizer/dense/kernel/v\"", "element 3 is -1"});
}

TEST_CASE("resume refuses a checkpoint whose callbacks' state is tampered, naming the key, writing nothing") {
  TempDir dir;
  dir.write("cb.json", R"({"model": ")" + source_path("configs/models/iris_mlp.json").string() +
                           R"(", "data": {"dataset": "iris", "validation_split": 0.1},
    "callbacks": [{"type": "EarlyStopping", "patience": 1}, {"type": "ReduceLROnPlateau", "patience": 1}]})");
  REQUIRE(run_tensorctl("train cb.json --epochs 2 --output run --quiet", dir.path()).status == 0);
  const fs::path checkpoint = dir / "run/checkpoint.safetensors";
  const tctl::SafetensorsFile original = tctl::load_safetensors(checkpoint);
  const nlohmann::json callbacks = nlohmann::json::parse(original.metadata.at("callbacks"));
  REQUIRE(callbacks.size() == 2);
  auto refused = [&](auto change, const std::vector<std::string>& needles) {
    nlohmann::json state = callbacks;
    change(state);
    std::map<std::string, std::string> metadata = original.metadata;
    metadata["callbacks"] = state.dump();
    tctl::save_safetensors(checkpoint, original.tensors, metadata);
    std::vector<std::string> all{"run/checkpoint.safetensors"};
    all.insert(all.end(), needles.begin(), needles.end());
    expect_user_error(dir, "train cb.json --resume run --epochs 3", all);
  };
  // Each ended in an escaped nlohmann exception (std::terminate) before.
  refused([](auto& s) { s[1].erase("has_best"); },
          {"__metadata__.callbacks[1]: damaged training state: missing required key \"has_best\""});
  refused([](auto& s) { s[0]["best"] = nullptr; },
          {"__metadata__.callbacks[0].best: damaged training state: expected a number, got null"});
  refused([](auto& s) { s[0]["type"] = 3; }, {"__metadata__.callbacks[0].type"});
  refused([](auto& s) { s[1] = "ReduceLROnPlateau"; },
          {"__metadata__.callbacks[1]: damaged training state: expected an object, got \"ReduceLROnPlateau\""});
  // A negative wait would never reach the patience.
  refused([](auto& s) { s[0]["wait"] = -1; },
          {"__metadata__.callbacks[0].wait: damaged training state: expected a non-negative integer, got -1"});
  refused([](auto& s) { s[1]["cooldown_left"] = 1.5; }, {"__metadata__.callbacks[1].cooldown_left"});
  refused([](auto& s) { s[0]["type"] = "ReduceLROnPlateau"; },
          {"__metadata__.callbacks[0]: damaged training state: the state of a callback of type \"ReduceLROnPlateau\" "
           "where its config has EarlyStopping"});
  refused([](auto& s) { s.erase(1); }, {"__metadata__.callbacks: damaged training state"});
  // A metric that was not finite is written as null (JSON has no NaN): such a run resumes. The checkpoint
  // holds the last epoch's row alone; the others are history.csv's.
  std::map<std::string, std::string> metadata = original.metadata;
  nlohmann::json history = nlohmann::json::parse(metadata.at("history"));
  REQUIRE(history.size() == 1);
  REQUIRE(history[0]["validation"][0][0] == "loss");
  history[0]["validation"][0][1] = nullptr;
  metadata["history"] = history.dump();
  tctl::save_safetensors(checkpoint, original.tensors, metadata);
  REQUIRE(run_tensorctl("train cb.json --resume run --epochs 3 --quiet", dir.path()).status == 0);
  const auto rows = split_lines(read_text(dir / "run/history.csv"));
  REQUIRE(rows.size() == 4);
  // Training's own metrics are never written so: a step with a non-finite loss ends the run.
  history = nlohmann::json::parse(original.metadata.at("history"));
  REQUIRE(history[0]["train"][0][0] == "loss");
  history[0]["train"][0][1] = nullptr;
  metadata["history"] = history.dump();
  tctl::save_safetensors(checkpoint, original.tensors, metadata);
  expect_user_error(dir, "train cb.json --resume run --epochs 3",
                    {"run/checkpoint.safetensors: __metadata__.history[0].train[0]: damaged training state: expected "
                     "a [name, number] pair, got a list"});
  // Untouched, it resumes.
  tctl::save_safetensors(checkpoint, original.tensors, original.metadata);
  CHECK(run_tensorctl("train cb.json --resume run --epochs 3 --quiet", dir.path()).status == 0);
}

TEST_CASE("a step gone NaN stops training with the epoch, step and first op, and the last good checkpoint stays") {
  TempDir dir;
  std::string rows = "a,b,label\n";
  for (int i = 0; i < 200; ++i)
    rows += std::to_string((i * 37 % 200) / 100.0 - 1.0) + "," + std::to_string((i * 91 % 200) / 100.0 - 1.0) + "," +
            std::to_string(i % 2) + "\n";
  dir.write("data.csv", rows);
  const std::string model = R"({"input_shape": [2], "layers": [{"type": "Dense", "units": 8, "activation": "relu"},
                                {"type": "Dense", "units": 2, "activation": "softmax"}]})";
  // A step schedule that multiplies the learning rate by 1e36 after 2 epochs (140 training rows in batches
  // of 32: 5 steps an epoch), so the weights blow up in epoch 3.
  dir.write("bad.json", R"({"model": )" + model + R"(, "data": {"csv": "data.csv"}, "epochs": 4,
                            "optimizer": {"type": "sgd", "schedule": {"type": "step", "step_size": 10, "gamma": 1e36}}})");
  REQUIRE(run_tensorctl("train bad.json --epochs 2 --output run --quiet", dir.path()).status == 0);
  const std::string before = read_text(dir / "run/checkpoint.safetensors");
  CommandResult r = run_tensorctl("train bad.json --resume run --quiet", dir.path());
  check_runtime_error(r, {"epoch 3, step ", "the first ", "came from op dense", "lower the learning rate"});
  CHECK(read_text(dir / "run/checkpoint.safetensors") == before);
}
