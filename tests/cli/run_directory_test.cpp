// A run directory never mixes two runs: train refuses a directory that is not empty unless --overwrite is
// given, and --overwrite deletes the old run's files (and only tensorctl's files) before it writes anything.
#include <doctest/doctest.h>

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
