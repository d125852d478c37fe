// libFuzzer harness: a training checkpoint as an interrupted run's `predict` and `evaluate`, and `train
// --resume`, read it. Each input is the checkpoint.safetensors of a run directory that holds nothing else but
// the model.json of tests/fuzz/checkpoint_config.json (the iris MLP, with EarlyStopping, ReduceLROnPlateau and
// ModelCheckpoint, whose state the checkpoint carries). First load_run on the interrupted run and what predict
// and evaluate do with it (tests/fuzz/run_checks.h); then the directory is set up again and training resumes
// from the checkpoint to epoch 3. A resumed run that finishes must have a history of whole epochs in order, with
// finite training metrics (training stops with an error on a loss that is not).
//
// The seeds are checkpoints of that config after one and two epochs:
//   tensorctl train tests/fuzz/checkpoint_config.json --epochs N --output DIR  (DIR/checkpoint.safetensors)
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "models/io/atomic_file.h"
#include "models/record/train_config.h"
#include "models/run/loaded_run.h"
#include "models/train/training_run.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/run_checks.h"

namespace {
const tctl::fuzz::ScratchDir& scratch() {
  static const tctl::fuzz::ScratchDir dir;
  return dir;
}

std::filesystem::path run_dir() { return scratch().path() / "run"; }

tctl::TrainConfig& config() {
  static tctl::TrainConfig c;
  return c;
}

// The model file and the test split of a run of the config, kept outside the run directory.
std::string& model_json() {
  static std::string text;
  return text;
}

std::string test_csv() { return (scratch().path() / "test.csv").string(); }

// A run directory with the model and `checkpoint`, nothing else: an interrupted run.
void set_up_run(std::string_view checkpoint) {
  std::filesystem::remove_all(run_dir());
  std::filesystem::create_directory(run_dir());
  scratch().write("run/model.json", model_json());
  scratch().write("run/checkpoint.safetensors", checkpoint);
}

void check_resumed(const tctl::TrainOutcome& out) {
  if (!out.last_epoch) return;
  const tctl::EpochResult& r = *out.last_epoch;
  TCTL_CHECK(r.epoch >= out.epochs_trained, "a resumed run whose last epoch is before the epochs it trained");
  for (const auto& [name, value] : r.train)
    TCTL_CHECK(std::isfinite(value), "a resumed run with a training metric that is not finite: " + name);
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  config() = tctl::load_train_config(
      (std::filesystem::path(TENSORCTL_SOURCE_DIR) / "tests/fuzz/checkpoint_config.json").string());
  config().output = run_dir().string();
  config().inter_op_threads = 1;
  config().intra_op_threads = 1;
  tctl::TrainConfig one = config();
  one.epochs = 1;
  (void)tctl::train_and_save(one, {}, {});
  model_json() = tctl::read_file(run_dir() / "model.json", "model.json");
  std::filesystem::copy_file(run_dir() / "test.csv", test_csv());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view checkpoint = tctl::fuzz::as_text(data, size);
  set_up_run(checkpoint);
  tctl::fuzz::accept_refusal([&] { tctl::fuzz::use_run(run_dir(), test_csv()); });
  set_up_run(checkpoint);
  tctl::fuzz::accept_refusal([&] {
    tctl::TrainControl control;
    control.resume = run_dir();
    check_resumed(tctl::train_and_save(config(), {}, {}, control));
  });
  return 0;
}
