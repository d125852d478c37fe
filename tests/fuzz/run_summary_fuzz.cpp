// libFuzzer harness: a run's summary.json as `predict`, `evaluate` and `export` read it. LLVMFuzzerInitialize
// trains configs/iris_mlp.json for one epoch into a scratch run directory (model.json, weights.safetensors,
// test.csv, summary.json); each input replaces its summary.json. Then load_run, and what predict and evaluate
// do with the run's own test.csv. A summary load_run accepts must hold what those commands rely on (class names
// one per class, labels that fit the model's outputs, targets of the loss's kind); reading test.csv may refuse
// it (a renamed feature or label), but predicting and evaluating what it read must then succeed.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>

#include "models/nn/losses.h"
#include "models/train/train_config.h"
#include "models/train/trainer.h"
#include "models/train/training_run.h"
#include "tests/fuzz/fuzz_util.h"

namespace {
const tctl::fuzz::ScratchDir& scratch() {
  static const tctl::fuzz::ScratchDir dir;
  return dir;
}

std::filesystem::path run_dir() { return scratch().path() / "run"; }

// What predict and evaluate rely on in a run load_run accepted and in the rows read_run_input read.
void check_run(const tctl::LoadedRun& run, const tctl::RunInput& in) {
  const std::int64_t outputs = run.model->net().output_shape().num_elements();
  const bool classes = tctl::loss_is_classification(run.config.loss);
  TCTL_CHECK(run.class_names.empty() || static_cast<int>(run.class_names.size()) == run.num_classes,
             "class names that are not one per class");
  TCTL_CHECK(classes ? run.num_classes >= 1 && run.num_classes <= outputs : run.num_classes == 0,
             "a number of classes that does not fit the loss and the model");
  TCTL_CHECK(in.x.shape()[0] == in.rows, "inputs that are not one per row");
  const tctl::Dataset& labelled = in.labelled;
  if (labelled.size() == 0) return;
  if (classes) {
    TCTL_CHECK(labelled.y.dtype() == tctl::DType::kI32 && labelled.y.num_elements() == in.rows,
               "class labels that are not one int32 per row");
    for (std::int64_t r = 0; r < in.rows; ++r) {
      const std::int32_t y = labelled.y.data<std::int32_t>()[r];
      TCTL_CHECK(y >= 0 && y < outputs, "a label outside the model's outputs");
    }
  } else {
    TCTL_CHECK(labelled.y.dtype() == tctl::DType::kF32 && labelled.y.num_elements() == in.rows * outputs,
               "targets that are not one float per row and output");
  }
}
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
  tctl::fuzz::accept_refusal([&] {
    const tctl::LoadedRun run = tctl::load_run(run_dir(), 1, 1);
    const tctl::RunInput in = tctl::read_run_input(run, (run_dir() / "test.csv").string());
    try {
      check_run(run, in);
      (void)run.model->predict(in.x, 64);
      if (in.labelled.size() > 0) (void)tctl::Trainer(*run.model).evaluate(in.labelled, 64);
    } catch (const std::exception& e) {
      TCTL_CHECK(false, std::string("a run load_run accepted fails in predict or evaluate: ") + e.what());
    }
  });
  return 0;
}
