// tensorctl predict --run DIR --input CSV [--output FILE] [--weights FILE] [--keep-columns A,B]: predictions of
// a trained run for new rows.
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "app/commands.h"
#include "app/flag_checks.h"
#include "app/terminal.h"
#include "core/errors.h"
#include "models/data/csv.h"
#include "models/io/atomic_file.h"
#include "models/run/loaded_run.h"
#include "models/run/output_check.h"
#include "models/run/run_input.h"

namespace tctl::app {

namespace {
struct PredictFlags {
  std::string run;
  std::string input;
  std::string output;
  std::string weights;
  std::vector<std::string> keep_columns;
  std::int64_t batch_size = 256;
};

// Whether the predictions are written by class name: a run whose labels were names, with one output per name
// (a model with more outputs than the data had classes is written by number).
bool by_name(const LoadedRun& run, std::int64_t width) {
  return run.num_classes > 0 && static_cast<std::int64_t>(run.class_names.size()) == width;
}

// The header row: kept columns, then a named-class run's class and one probability per class named after
// it, a numbered-class run's prob_0.. and predicted, or a regression's value_0...
std::string header_row(const LoadedRun& run, const RunInput& in, std::int64_t width) {
  std::vector<std::string> names = in.kept_names;
  const bool named = by_name(run, width);
  if (named) names.push_back("class");
  for (std::int64_t j = 0; j < width; ++j)
    names.push_back(named ? run.class_names[static_cast<std::size_t>(j)]
                          : (run.num_classes > 0 ? "prob_" : "value_") + std::to_string(j));
  if (run.num_classes > 0 && !named) names.push_back("predicted");
  std::string row;
  for (const auto& n : names) row += (row.empty() ? "" : ",") + csv_field(n);
  return row + "\n";
}

int run_predict(const PredictFlags& f) {
  if (!f.output.empty()) check_output_path(f.output, "--output");

  LoadedRun run = load_run(f.run, 0, 0, f.weights);
  check_output_keeps_inputs(f.output, "--output", {f.input});
  RunInput in = read_run_input(run, f.input, f.keep_columns);
  print_placement_warnings(run.model->placement_warnings());
  Tensor pred = run.model->predict(in.x, f.batch_size);
  check_finite_outputs(pred, in, f.input);
  const std::int64_t n = in.rows;
  const std::int64_t width = n ? pred.num_elements() / n : run.model->net().output_shape().num_elements();
  const bool classes = run.num_classes > 0;
  const bool named = by_name(run, width);
  const bool labelled = in.labelled.size() > 0;

  std::string csv = header_row(run, in, width);
  std::int64_t correct = 0;
  double abs_error = 0.0, squared_error = 0.0;
  for (std::int64_t r = 0; r < n; ++r) {
    const float* p = pred.data<float>() + r * width;
    for (const auto& column : in.kept) csv.append(csv_field(column[static_cast<std::size_t>(r)])).append(",");
    std::int64_t best = 0;
    for (std::int64_t j = 1; j < width; ++j)
      if (p[j] > p[best]) best = j;
    if (named) csv.append(csv_field(run.class_names[static_cast<std::size_t>(best)])).append(",");
    for (std::int64_t j = 0; j < width; ++j) csv += std::string(j ? "," : "") + fmt::format("{:.6g}", p[j]);
    if (classes && !named) csv += "," + std::to_string(best);
    csv += "\n";
    if (!labelled) continue;
    if (classes) {
      correct += in.labelled.y.data<std::int32_t>()[r] == best;
    } else {
      // Regression: the targets, one per output.
      for (std::int64_t j = 0; j < width; ++j) {
        const double e = static_cast<double>(p[j]) - in.labelled.y.data<float>()[r * width + j];
        abs_error += std::abs(e);
        squared_error += e * e;
      }
    }
  }
  if (f.output.empty()) {
    std::fwrite(csv.data(), 1, csv.size(), stdout);
  } else {
    write_file_atomic(f.output, csv);
    std::fprintf(stderr, "wrote %lld predictions to %s\n", static_cast<long long>(n), printable_line(f.output).c_str());
  }
  if (labelled && classes)
    std::fprintf(stderr, "accuracy: %.4f (%lld of %lld labelled rows)\n",
                 static_cast<double>(correct) / static_cast<double>(n), static_cast<long long>(correct),
                 static_cast<long long>(n));
  if (labelled && !classes) {
    const double cells = static_cast<double>(n * width);
    const std::string targets = run.targets == 1 ? "the target " + tctl::quote_for_message(run.label)
                                                 : fmt::format("the {} targets {}_0 to {}_{}", run.targets, run.label,
                                                               run.label, run.targets - 1);
    std::fprintf(stderr, "mae: %.4f - mse: %.4f (%lld rows with %s)\n", abs_error / cells, squared_error / cells,
                 static_cast<long long>(n), targets.c_str());
  }
  return 0;
}

void define_flags(CLI::App& cmd, PredictFlags& flags) {
  cmd.add_option("--run", flags.run, "Run directory written by train (a finished or an interrupted run)")
      ->required()
      ->check(non_empty("a run directory"));
  cmd.add_option("--input", flags.input,
                 "CSV with the model's feature columns (a label column is optional; its text column for a model "
                 "trained on text), a .npy or IDX array of rows of features, or, for a model trained on images, a "
                 "folder, an image or a CSV of paths; - for standard input")
      ->required()
      ->check(non_empty("a CSV file"));
  cmd.add_option("--output", flags.output, "Write the predictions to this CSV instead of stdout")->check(output_path());
  cmd.add_option("--weights", flags.weights,
                 "Weights file of the run to use, relative to it (best.safetensors, checkpoint.safetensors); "
                 "default weights.safetensors")
      ->check(non_empty("a weights file of the run"));
  cmd.add_option("--keep-columns", flags.keep_columns, "Columns of the input to copy into the output, first")
      ->delimiter(',');
  cmd.add_option("--batch-size", flags.batch_size, "Rows per batch")->check(positive_integer());
}

}  // namespace

Command add_predict_command(CLI::App& app) {
  return add_command<PredictFlags>(app, "predict", "Predict with a trained run on the rows of a CSV file", define_flags,
                                   run_predict);
}

}  // namespace tctl::app
