// Shared by the harnesses that load a run directory or feed one rows (run_summary_fuzz, checkpoint_fuzz,
// predict_input_fuzz): what `predict` and `evaluate` rely on in a run load_run accepted, checked on the rows
// read_run_input read for it, then both done. Reading the rows may refuse them (a missing feature, a label the
// run has no class for); after that nothing may fail.
#pragma once

#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "core/errors.h"
#include "models/nn/losses.h"
#include "models/run/loaded_run.h"
#include "models/run/run_input.h"

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

// read_run_input on `csv` (keeping `keep_columns`), then check_run, predict and evaluate.
inline void use_rows(const LoadedRun& run, const std::string& csv, const std::vector<std::string>& keep_columns = {}) {
  const RunInput in = read_run_input(run, csv, keep_columns);
  try {
    TCTL_CHECK(in.kept.size() == keep_columns.size(), "kept columns that are not the ones asked for");
    for (const auto& column : in.kept)
      TCTL_CHECK(static_cast<std::int64_t>(column.size()) == in.rows, "a kept column that is not one cell per row");
    check_run(run, in);
    (void)run.model->predict(in.x, 64);
    if (in.labelled.size() > 0) (void)run.model->evaluate(in.labelled, 64);
  } catch (const std::exception& e) {
    TCTL_CHECK(false, std::string("rows read_run_input accepted fail in predict or evaluate: ") + e.what());
  }
}

// load_run, then use_rows on `csv`.
inline void use_run(const std::filesystem::path& dir, const std::string& csv) { use_rows(load_run(dir, 1, 1), csv); }

}  // namespace tctl::fuzz
