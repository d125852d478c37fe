// tensorctl evaluate --run DIR --data CONFIG|CSV: a trained run's loss and metrics on a config's test split
// or on a labelled CSV.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "app/commands.h"
#include "app/flag_checks.h"
#include "app/terminal.h"
#include "core/errors.h"
#include "models/run/loaded_run.h"
#include "models/run/run_input.h"

namespace tctl::app {

namespace {
struct EvaluateFlags {
  std::string run;
  std::string data;
  std::string weights;
  std::int64_t batch_size = 256;
  bool json = false;
};

int run_evaluate(const EvaluateFlags& f) {
  LoadedRun run = load_run(f.run, 0, 0, f.weights);
  Dataset data;
  std::string source;
  if (f.data.ends_with(".json")) {
    data = read_run_test_split(run, f.data);
    source = f.data + " (test split)";
  }
  RunInput in;  // a CSV's rows
  if (source.empty()) {
    in = read_run_input(run, f.data);
    if (in.labelled.size() == 0 && in.rows > 0)
      throw SpecError(f.data, "line 1", "no label column " + quote_for_message(run.label) + " to evaluate against");
    data = in.labelled;
    source = f.data;
  }
  if (data.size() == 0) throw SpecError(f.data, "", "no rows to evaluate");
  print_placement_warnings(run.model->placement_warnings());
  MetricValues m = evaluate_run(run, data, f.batch_size);
  // A loss gone non-finite on a CSV's finite rows: the row whose outputs overflowed is named.
  const bool finite = std::all_of(m.begin(), m.end(), [](const auto& kv) { return std::isfinite(kv.second); });
  if (in.rows > 0 && !finite) check_finite_outputs(run.model->predict(in.x, f.batch_size), in, f.data);
  if (f.json) {
    nlohmann::json j = {{"run", f.run}, {"weights", run.weights.string()}, {"data", source}, {"rows", data.size()}};
    for (const auto& [k, v] : m) j[k] = v;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%lld rows from %s%s\n", static_cast<long long>(data.size()), source.c_str(), metrics_text(m).c_str());
  return 0;
}

void define_flags(CLI::App& cmd, EvaluateFlags& flags) {
  cmd.add_option("--run", flags.run, "Run directory written by train")->required()->check(non_empty("a run directory"));
  cmd.add_option("--data", flags.data, "Train config (its test split is used) or labelled CSV")
      ->required()
      ->check(non_empty("a train config or a CSV file"));
  cmd.add_option("--weights", flags.weights,
                 "Weights file of the run to use, relative to it (best.safetensors, checkpoint.safetensors); "
                 "default weights.safetensors")
      ->check(non_empty("a weights file of the run"));
  cmd.add_option("--batch-size", flags.batch_size, "Rows per batch")->check(positive_integer());
  cmd.add_flag("--json", flags.json, "Print the result as JSON");
}

}  // namespace

Command add_evaluate_command(CLI::App& app) {
  return add_command<EvaluateFlags>(app, "evaluate",
                                    "Loss and metrics of a trained run on a config's test split or a labelled CSV",
                                    define_flags, run_evaluate);
}

}  // namespace tctl::app
