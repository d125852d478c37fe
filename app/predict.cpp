// tensorctl predict --run DIR --input CSV [--output FILE] [--weights FILE] [--keep-columns A,B]: predictions of
// a trained run for new rows.
#include <algorithm>
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

// What a run's outputs are: class probabilities (a categorical loss), independent probabilities of 1 (binary
// cross-entropy: a sigmoid per output, as Keras' binary classifiers end), or a regression's values.
enum class OutputKind { kClasses, kBinary, kValues };

OutputKind output_kind(const LoadedRun& run) {
  if (run.num_classes > 0) return OutputKind::kClasses;
  return run.binary ? OutputKind::kBinary : OutputKind::kValues;
}

// The header row: kept columns, then a named-class run's class and one probability per class named after
// it, a numbered-class run's prob_0.. and predicted, a binary run's prob_1 and predicted (prob_0.. and
// predicted_0.. for several outputs), or a regression's value_0...
std::string header_row(const LoadedRun& run, const RunInput& in, std::int64_t width) {
  std::vector<std::string> names = in.kept_names;
  const bool named = by_name(run, width);
  const OutputKind kind = output_kind(run);
  if (named) names.push_back("class");
  for (std::int64_t j = 0; j < width; ++j) {
    if (named)
      names.push_back(run.class_names[static_cast<std::size_t>(j)]);
    else if (kind == OutputKind::kValues)
      names.push_back("value_" + std::to_string(j));
    else
      names.push_back("prob_" + std::to_string(kind == OutputKind::kBinary && width == 1 ? 1 : j));
  }
  if (kind == OutputKind::kClasses && !named) names.push_back("predicted");
  if (kind == OutputKind::kBinary)
    for (std::int64_t j = 0; j < width; ++j)
      names.push_back(width == 1 ? "predicted" : "predicted_" + std::to_string(j));
  // A name twice makes a CSV that predict itself (and most readers) refuse: a kept column named as an output.
  for (std::size_t i = 0; i < names.size(); ++i)
    for (std::size_t j = 0; j < std::min(i, in.kept_names.size()); ++j)
      if (names[i] == names[j])
        throw SpecError("", "--keep-columns",
                        fmt::format("the output would hold the column {} twice{}", quote_for_message(names[i]),
                                    i < in.kept_names.size() ? "" : " (kept, and written by predict)"));
  std::string row;
  for (const auto& n : names) row += (row.empty() ? "" : ",") + csv_field(n);
  return row + "\n";
}

// The scores of labelled rows, as evaluate computes them: accuracy for classes and binary outputs (an output
// above 0.5 is a 1, and a binary row scores the share of its outputs that match), mae and mse for values.
struct Scores {
  double correct = 0.0, abs_error = 0.0, squared_error = 0.0;
};

// One row's predictions `p` as CSV cells, its scores added to `scores` where it is labelled.
void append_row(const LoadedRun& run, const RunInput& in, std::int64_t r, const float* p, std::int64_t width,
                std::string& csv, Scores& scores) {
  const OutputKind kind = output_kind(run);
  const bool named = by_name(run, width);
  for (const auto& column : in.kept) csv.append(csv_field(column[static_cast<std::size_t>(r)])).append(",");
  std::int64_t best = 0;
  for (std::int64_t j = 1; j < width; ++j)
    if (p[j] > p[best]) best = j;
  if (named) csv.append(csv_field(run.class_names[static_cast<std::size_t>(best)])).append(",");
  for (std::int64_t j = 0; j < width; ++j) {
    if (j > 0) csv += ',';
    append_csv_float(csv, p[j]);
  }
  if (kind == OutputKind::kClasses && !named) csv += "," + std::to_string(best);
  if (kind == OutputKind::kBinary)
    for (std::int64_t j = 0; j < width; ++j) csv += p[j] > 0.5f ? ",1" : ",0";
  csv += "\n";
  if (in.labelled.size() == 0) return;
  if (kind == OutputKind::kClasses) {
    scores.correct += in.labelled.y.data<std::int32_t>()[r] == best;
    return;
  }
  // Targets, one per output.
  const float* t = in.labelled.y.data<float>() + r * width;
  for (std::int64_t j = 0; j < width; ++j) {
    if (kind == OutputKind::kBinary) scores.correct += ((p[j] > 0.5f) == (t[j] > 0.5f)) / static_cast<double>(width);
    const double e = static_cast<double>(p[j]) - t[j];
    scores.abs_error += std::abs(e);
    scores.squared_error += e * e;
  }
}

void report_scores(const LoadedRun& run, const Scores& s, std::int64_t n, std::int64_t width) {
  const OutputKind kind = output_kind(run);
  if (kind == OutputKind::kClasses || (kind == OutputKind::kBinary && width == 1)) {
    const auto correct = static_cast<long long>(std::llround(s.correct));
    std::fprintf(stderr, "accuracy: %.4f (%lld of %lld labelled rows)\n", s.correct / static_cast<double>(n), correct,
                 static_cast<long long>(n));
    return;
  }
  if (kind == OutputKind::kBinary) {
    std::fprintf(stderr, "accuracy: %.4f (%lld labelled rows of %lld outputs)\n", s.correct / static_cast<double>(n),
                 static_cast<long long>(n), static_cast<long long>(width));
    return;
  }
  const double cells = static_cast<double>(n * width);
  const std::string targets = run.targets == 1 ? "the target " + tctl::quote_for_message(run.label)
                                               : fmt::format("the {} targets {}_0 to {}_{}", run.targets, run.label,
                                                             run.label, run.targets - 1);
  std::fprintf(stderr, "mae: %.4f - mse: %.4f (%lld rows with %s)\n", s.abs_error / cells, s.squared_error / cells,
               static_cast<long long>(n), targets.c_str());
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

  std::string csv = header_row(run, in, width);
  Scores scores;
  for (std::int64_t r = 0; r < n; ++r) append_row(run, in, r, pred.data<float>() + r * width, width, csv, scores);
  if (f.output.empty()) {
    std::fwrite(csv.data(), 1, csv.size(), stdout);
  } else {
    write_file_atomic(f.output, csv);
    std::fprintf(stderr, "wrote %lld predictions to %s\n", static_cast<long long>(n), printable_line(f.output).c_str());
  }
  if (in.labelled.size() > 0) report_scores(run, scores, n, width);
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
