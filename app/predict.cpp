// tensorctl predict --run DIR --input CSV [--output FILE]: predictions of a trained run for new rows.
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "app/commands.h"
#include "app/flag_checks.h"
#include "app/terminal.h"
#include "core/errors.h"
#include "models/io/atomic_file.h"
#include "models/train/training_run.h"

namespace tctl::app {

namespace {
struct PredictFlags {
  std::string run;
  std::string input;
  std::string output;
  std::int64_t batch_size = 256;
};

int run_predict(const PredictFlags& f) {
  if (!f.output.empty()) check_output_path(f.output, "--output");

  LoadedRun run = load_run(f.run);
  RunInput in = read_run_input(run, f.input);
  Tensor pred = run.model->predict(in.x, f.batch_size);
  const std::int64_t n = in.rows;
  const std::int64_t width = n ? pred.num_elements() / n : run.model->net().output_shape().num_elements();
  const bool classes = run.num_classes > 0;

  std::string csv;
  for (std::int64_t j = 0; j < width; ++j)
    csv += std::string(j ? "," : "") + (classes ? "prob_" : "value_") + std::to_string(j);
  csv += classes ? ",predicted\n" : "\n";
  std::int64_t correct = 0;
  for (std::int64_t r = 0; r < n; ++r) {
    const float* p = pred.data<float>() + r * width;
    std::int64_t best = 0;
    for (std::int64_t j = 0; j < width; ++j) {
      csv += std::string(j ? "," : "") + fmt::format("{:.6g}", p[j]);
      if (p[j] > p[best]) best = j;
    }
    if (classes) csv += "," + std::to_string(best);
    csv += "\n";
    if (classes && in.labelled.size() > 0) correct += in.labelled.y.data<std::int32_t>()[r] == best;
  }
  if (f.output.empty()) {
    std::fwrite(csv.data(), 1, csv.size(), stdout);
  } else {
    write_file_atomic(f.output, csv);
    std::fprintf(stderr, "wrote %lld predictions to %s\n", static_cast<long long>(n), f.output.c_str());
  }
  if (classes && in.labelled.size() > 0)
    std::fprintf(stderr, "accuracy: %.4f (%lld of %lld labelled rows)\n",
                 static_cast<double>(correct) / static_cast<double>(n), static_cast<long long>(correct),
                 static_cast<long long>(n));
  return 0;
}

void define_flags(CLI::App& cmd, PredictFlags& flags) {
  cmd.add_option("--run", flags.run, "Run directory written by train")->required();
  cmd.add_option("--input", flags.input, "CSV with the model's feature columns (a label column is optional)")
      ->required();
  cmd.add_option("--output", flags.output, "Write the predictions to this CSV instead of stdout");
  cmd.add_option("--batch-size", flags.batch_size, "Rows per batch")->check(positive_integer());
}

}  // namespace

Command add_predict_command(CLI::App& app) {
  return add_command<PredictFlags>(app, "predict", "Predict with a trained run on the rows of a CSV file", define_flags,
                                   run_predict);
}

}  // namespace tctl::app
