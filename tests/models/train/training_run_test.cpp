// train_and_save's checkpoints around an interrupt: a run stopped before its first epoch ended resumes
// with its callbacks, EarlyStopping's best weights included, and ends where an unbroken run ends.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "models/io/safetensors.h"
#include "models/record/train_config.h"
#include "models/train/training_run.h"

namespace tctl {
namespace {

// A directory under the system's temporary one, removed with its contents at the end of the test.
struct ScratchDir {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("tctl_training_run_" + std::to_string(std::random_device{}()));
  ScratchDir() { std::filesystem::create_directories(path); }
  ~ScratchDir() { std::filesystem::remove_all(path); }
};

TrainConfig iris_config(const ScratchDir& dir, const std::string& output) {
  const std::filesystem::path file = dir.path / (output + ".json");
  std::ofstream(file) << R"({"model": {"name": "iris", "input_shape": [4], "layers": [
      {"type": "Dense", "units": 8, "activation": "relu"}, {"type": "Dense", "units": 3, "activation": "softmax"}]},
    "data": {"dataset": "iris", "test_split": 0.2, "validation_split": 0.2, "shuffle": true, "standardize": true},
    "loss": "sparse_categorical_crossentropy", "optimizer": {"type": "adam", "learning_rate": 0.01},
    "metrics": ["accuracy"], "epochs": 3, "batch_size": 8, "seed": 7, "threads": {"inter_op": 1, "intra_op": 1},
    "callbacks": [{"type": "EarlyStopping", "monitor": "val_loss", "patience": 5, "restore_best_weights": true},
                  {"type": "ReduceLROnPlateau", "monitor": "val_loss", "factor": 0.5, "patience": 1}],
    "output": ")" + (dir.path / output).string() +
                             R"("})";
  return load_train_config(file.string());
}

}  // namespace

TEST_CASE("a run with callbacks interrupted before its first epoch ended resumes, and ends as an unbroken run") {
  ScratchDir dir;
  const TrainConfig straight = iris_config(dir, "straight");
  train_and_save(straight, {}, {});

  const TrainConfig broken = iris_config(dir, "broken");
  std::atomic<bool> interrupt{true};  // set from the start: the first step finishes, then the run stops
  TrainControl stop;
  stop.interrupt = &interrupt;
  const TrainOutcome first = train_and_save(broken, {}, {}, stop);
  REQUIRE(first.interrupted_at.has_value());
  CHECK(first.interrupted_at->epoch == 1);
  CHECK(first.interrupted_at->steps_done == 1);

  TrainControl resume;
  resume.resume = broken.output;
  const TrainOutcome second = train_and_save(broken, {}, {}, resume);
  CHECK(!second.interrupted_at.has_value());
  REQUIRE(second.last_epoch.has_value());
  CHECK(second.last_epoch->epoch == 3);
  CHECK(second.epochs_trained == 3);
  const SafetensorsFile a = load_safetensors(dir.path / "straight/weights.safetensors");
  const SafetensorsFile b = load_safetensors(dir.path / "broken/weights.safetensors");
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    CAPTURE(a.tensors[i].name);
    CHECK(a.tensors[i].name == b.tensors[i].name);
    const Tensor& x = a.tensors[i].value;
    const Tensor& y = b.tensors[i].value;
    REQUIRE(x.num_elements() == y.num_elements());
    CHECK(std::memcmp(x.data<float>(), y.data<float>(), sizeof(float) * static_cast<std::size_t>(x.num_elements())) ==
          0);
  }
}

}  // namespace tctl
