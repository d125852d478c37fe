// tensorctl train CONFIG: trains a config and writes its run directory.
#include <cstdio>

#include <fmt/format.h>

#include "app/commands.h"
#include "app/flag_checks.h"
#include "app/terminal.h"
#include "core/device.h"
#include "core/errors.h"
#include "models/training_run.h"

namespace tctl::app {

namespace {
struct TrainFlags {
  std::string config;
  std::optional<std::int64_t> epochs, batch_size, seed;
  std::optional<int> inter_op, intra_op;
  std::optional<std::string> output, device;
  bool json = false;
  bool quiet = false;
};

int run_train(const TrainFlags& f) {
  TrainConfig c = load_train_config(f.config);
  if (f.epochs) c.epochs = *f.epochs;
  if (f.batch_size) c.batch_size = *f.batch_size;
  if (f.seed) c.seed = static_cast<std::uint64_t>(*f.seed);
  if (f.inter_op) c.inter_op_threads = *f.inter_op;
  if (f.intra_op) c.intra_op_threads = *f.intra_op;
  if (f.output) c.output = *f.output;
  if (f.device) {
    if (!is_device_name(*f.device)) throw SpecError("", "--device", "unknown device \"" + *f.device + "\" (expected cpu, cuda or cuda:N)");
    c.device = *f.device;
  }

  // With --json, stdout carries only the JSON document; progress goes to stderr.
  std::FILE* log = f.json ? stderr : stdout;
  ProgressPrinter progress(log, c.epochs);
  Model::EpochCallback on_epoch;
  Model::StepCallback on_step;
  if (!f.quiet) {
    on_epoch = [&](const EpochResult& r) { progress.on_epoch(r); };
    on_step = [&](std::int64_t s, std::int64_t n, const MetricValues& m) { progress.on_step(s, n, m); };
  }
  TrainOutcome out = train_and_save(c, on_epoch, on_step);
  const auto& warnings = out.placement_warnings;
  for (std::size_t i = 0; i < warnings.size() && i < 3; ++i) std::fprintf(stderr, "warning: %s\n", warnings[i].c_str());
  if (warnings.size() > 3) std::fprintf(stderr, "warning: ... and %zu more nodes fell back to cpu\n", warnings.size() - 3);
  if (f.json) {
    std::printf("%s\n", out.summary.dump(2).c_str());
    return 0;
  }
  if (!out.test.empty()) std::fprintf(log, "Test%s\n", metrics_text(out.test).c_str());
  std::fprintf(log, "%s\n",
               fmt::format("Trained {} for {} epochs in {:.2f}s ({} samples/s); run saved to {}", c.model_spec.value("name", "model"),
                           c.epochs, out.seconds, thousands(static_cast<std::int64_t>(out.samples_per_second)), c.output)
                   .c_str());
  return 0;
}
}  // namespace

Command add_train_command(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* cmd = app.add_subcommand("train", "Train a model from a train config and write its run directory");
  cmd->add_option("config", flags->config, "Train config (JSON)")->required();
  cmd->add_option("--epochs", flags->epochs, "Override the number of epochs")->check(positive_integer());
  cmd->add_option("--batch-size", flags->batch_size, "Override the batch size")->check(positive_integer());
  cmd->add_option("--seed", flags->seed, "Override the seed")->check(non_negative_integer());
  cmd->add_option("--inter-op-threads", flags->inter_op, "Threads running independent graph nodes (0: one per core)")
      ->check(integer_in(0, 1024));
  cmd->add_option("--intra-op-threads", flags->intra_op, "Threads splitting the work inside one op (0: one per core)")
      ->check(integer_in(0, 1024));
  cmd->add_option("--output", flags->output, "Run directory to write (default from the config, else runs/<config name>)");
  cmd->add_option("--device", flags->device, "Default device for every layer: cpu, cuda, cuda:N");
  cmd->add_flag("--json", flags->json, "Print the final summary as JSON on stdout (progress goes to stderr)");
  cmd->add_flag("--quiet", flags->quiet, "No progress output");
  return [flags] { return run_train(*flags); };
}

}  // namespace tctl::app
