// Shared by the harnesses that load a run directory (run_summary_fuzz, checkpoint_fuzz): what `predict` and
// `evaluate` rely on in a run load_run accepted, checked on the rows read_run_input read from it, then both
// done. Reading the rows may refuse them (a renamed feature or label); after that nothing may fail.
#pragma once

#include <exception>
#include <string>

#include "core/errors.h"
#include "models/nn/losses.h"
#include "models/train/trainer.h"
#include "models/train/training_run.h"

namespace tctl::fuzz {

inline void check_run(const LoadedRun& run, const RunInput& in) {
  const std::int64_t outputs = run.model->net().output_shape().num_elements();
  const bool classes = loss_is_classification(run.config.loss);
  TCTL_CHECK(run.class_names.empty() || static_cast<int>(run.class_names.size()) == run.num_classes,
             "class names that are not one per class");
  TCTL_CHECK(classes ? run.num_classes >= 1 && run.num_classes <= outputs : run.num_classes == 0,
             "a number of classes that does not fit the loss and the model");
  TCTL_CHECK(in.x.shape()[0] == in.rows, "inputs that are not one per row");
  const Dataset& labelled = in.labelled;
  if (labelled.size() == 0) return;
  if (classes) {
    TCTL_CHECK(labelled.y.dtype() == DType::kI32 && labelled.y.num_elements() == in.rows,
               "class labels that are not one int32 per row");
    for (std::int64_t r = 0; r < in.rows; ++r) {
      const std::int32_t y = labelled.y.data<std::int32_t>()[r];
      TCTL_CHECK(y >= 0 && y < outputs, "a label outside the model's outputs");
    }
  } else {
    TCTL_CHECK(labelled.y.dtype() == DType::kF32 && labelled.y.num_elements() == in.rows * outputs,
               "targets that are not one float per row and output");
  }
}

// load_run, read_run_input on `csv`, then check_run, predict and evaluate.
inline void use_run(const std::filesystem::path& dir, const std::string& csv) {
  const LoadedRun run = load_run(dir, 1, 1);
  const RunInput in = read_run_input(run, csv);
  try {
    check_run(run, in);
    (void)run.model->predict(in.x, 64);
    if (in.labelled.size() > 0) (void)Trainer(*run.model).evaluate(in.labelled, 64);
  } catch (const std::exception& e) {
    TCTL_CHECK(false, std::string("a run load_run accepted fails in predict or evaluate: ") + e.what());
  }
}

}  // namespace tctl::fuzz
