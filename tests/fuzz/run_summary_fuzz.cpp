// libFuzzer harness: a run's summary.json as `predict` and `evaluate` read it (`export` loads it alike).
// LLVMFuzzerInitialize trains configs/iris_mlp.json for one epoch into a scratch run directory (model.json,
// weights.safetensors, test.csv, summary.json); each input replaces its summary.json. Then load_run, and what predict
// and evaluate do with the run's own test.csv (tests/fuzz/run_checks.h).
#include <cstddef>
#include <cstdint>
#include <filesystem>

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
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tctl::TrainConfig config =
      tctl::load_train_config((std::filesystem::path(TENSORCTL_SOURCE_DIR) / "configs/iris_mlp.json").string());
  config.epochs = 1;
  config.output = run_dir().string();
  config.inter_op_threads = 1;
  config.intra_op_threads = 1;
  (void)tctl::train_and_save(config, {}, {});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  scratch().write("run/summary.json", tctl::fuzz::as_text(data, size));
  tctl::fuzz::accept_refusal([&] { tctl::fuzz::use_run(run_dir(), (run_dir() / "test.csv").string()); });
  return 0;
}
