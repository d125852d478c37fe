// tensorctl train CONFIG: trains a config and writes its run directory.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include <atomic>
#include <filesystem>
#include <iterator>

#include "app/commands.h"
#include "app/flag_checks.h"
#include "app/terminal.h"
#include "core/errors.h"
#include "core/mpi_world.h"
#include "core/thread_pool.h"
#include "models/io/atomic_file.h"
#include "models/io/run_layout.h"
#include "models/record/config_override.h"
#include "models/record/precision.h"
#include "models/train/training_run.h"

namespace tctl::app {

namespace {
struct TrainFlags {
  std::string config;
  std::optional<std::int64_t> epochs, batch_size, seed, folds;
  std::optional<int> inter_op, intra_op, data_threads;
  std::optional<std::string> output, device, resume, precision;
  std::vector<std::string> set;  // --set KEY=VALUE, in order
  bool json = false;
  bool quiet = false;
  bool keep_denormals = false;
  bool strict_placement = false;
  bool log_device_placement = false;
  bool overwrite = false;
};

// The command that continues an interrupted run: the same config and every flag it was started with, with
// --resume in place of --output, so the resumed run is the run that stopped.
std::string resume_command(const TrainFlags& f, const std::string& run_dir) {
  std::string out = "tensorctl train " + shell_word(f.config) + " --resume " + shell_word(run_dir);
  auto add = [&out](const char* flag, const auto& value) {
    if (value) out += fmt::format(" {} {}", flag, shell_word(fmt::format("{}", *value)));
  };
  add("--epochs", f.epochs);
  add("--batch-size", f.batch_size);
  add("--seed", f.seed);
  add("--inter-op-threads", f.inter_op);
  add("--intra-op-threads", f.intra_op);
  add("--data-threads", f.data_threads);
  add("--device", f.device);
  add("--precision", f.precision);
  for (const std::string& s : f.set) out += " --set " + shell_word(s);
  if (f.keep_denormals) out += " --keep-denormals";
  if (f.strict_placement) out += " --strict-placement";
  if (f.log_device_placement) out += " --log-device-placement";
  if (f.json) out += " --json";
  if (f.quiet) out += " --quiet";
  return out;
}

// Set by SIGINT (Ctrl-C), SIGTERM (`kill`, a batch system's time limit, mpirun passing on a Ctrl-C to its
// ranks) or SIGHUP (the terminal closed, an ssh session dropped); training finishes its step, writes a
// checkpoint and stops. The handler only stores to lock-free
// atomics, which is async-signal-safe; a second signal gets the default action and ends the process.
std::atomic<bool> g_interrupted{false};
std::atomic<int> g_signal{0};
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free);

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

// The first signal is the one reported; it puts all three back to their default actions (sigaction is
// async-signal-safe), so a second one of any kind ends the process. All are blocked while it runs.
extern "C" void on_stop_signal(int sig) {
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (int s : kStopSignals) sigaction(s, &default_action, nullptr);
  g_signal.store(sig, std::memory_order_relaxed);
  g_interrupted.store(true, std::memory_order_relaxed);
}

// Installs on_stop_signal for the stop signals for the life of the object, and restores the previous actions
// after. A SIGHUP that nohup set to be ignored stays ignored.
class StopSignalGuard {
 public:
  StopSignalGuard() {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    for (int s : kStopSignals) sigaddset(&sa.sa_mask, s);
    sa.sa_flags = 0;
    for (std::size_t i = 0; i < std::size(kStopSignals); ++i) {
      sigaction(kStopSignals[i], nullptr, &previous_[i]);
      if (kStopSignals[i] == SIGHUP && previous_[i].sa_handler == SIG_IGN) continue;
      sigaction(kStopSignals[i], &sa, nullptr);
    }
  }
  ~StopSignalGuard() {
    for (std::size_t i = 0; i < std::size(kStopSignals); ++i) sigaction(kStopSignals[i], &previous_[i], nullptr);
  }
  StopSignalGuard(const StopSignalGuard&) = delete;
  StopSignalGuard& operator=(const StopSignalGuard&) = delete;

 private:
  struct sigaction previous_[std::size(kStopSignals)]{};
};

// How a stop signal is reported: "Interrupted" (SIGINT, or another rank's vote), "Terminated (SIGTERM)",
// "Hung up (SIGHUP)".
const char* stop_text(int sig) {
  if (sig == SIGTERM) return "Terminated (SIGTERM)";
  if (sig == SIGHUP) return "Hung up (SIGHUP)";
  return "Interrupted";
}

// "10 epochs", or after a resume "epochs 6-10 (resumed)"; an early stop shows where it stopped.
std::string epochs_text(const TrainOutcome& out) {
  const std::int64_t last = out.last_epoch ? out.last_epoch->epoch : 0;
  if (last == 0) return "0 epochs (its starting weights, evaluated and saved)";
  if (out.first_epoch > last) return "no more epochs (the run had already trained " + std::to_string(last) + ")";
  if (out.first_epoch > 1) return fmt::format("epochs {}-{} (resumed)", out.first_epoch, last);
  return fmt::format("{} epochs", last);
}

// The config with the command line's overrides; --keep-denormals takes effect here.
TrainConfig config_with_flags(const TrainFlags& f) {
  std::vector<ConfigOverride> overrides;
  // --precision is the config key's override, checked as the key is; a --set of it after wins.
  if (f.precision) overrides.push_back(parse_override("precision=" + *f.precision));
  for (const std::string& s : f.set) overrides.push_back(parse_override(s));
  TrainConfig c = load_train_config(f.config, overrides);
  if (f.epochs) c.epochs = *f.epochs;
  if (f.batch_size) c.batch_size = *f.batch_size;
  if (f.seed) c.seed = static_cast<std::uint64_t>(*f.seed);
  if (f.inter_op) c.inter_op_threads = *f.inter_op;
  if (f.intra_op) c.intra_op_threads = *f.intra_op;
  if (f.data_threads) c.data_threads = *f.data_threads;
  if (f.output && f.resume)
    throw SpecError("", "--output", "--resume continues the run in its own directory; drop --output");
  if (f.overwrite && f.resume)
    throw SpecError("", "--overwrite",
                    "--resume continues the run in its directory and --overwrite replaces it; give one");
  if ((f.output && f.output->empty()) || (f.resume && f.resume->empty()))
    throw SpecError("", f.output ? "--output" : "--resume", "expected the run directory's path, got an empty string");
  if (f.output) c.output = *f.output;
  if (f.resume) c.output = *f.resume;
  c.keep_denormals = f.keep_denormals;
  c.strict_placement = f.strict_placement;
  c.log_device_placement = f.log_device_placement;
  if (f.keep_denormals) set_denormal_flushing(false);
  if (f.device) c.device = *f.device;
  return c;
}

// The line on how a hogwild, mirrored or multi-worker run went, from its summary's "strategy"; none for one
// replica.
void print_strategy_line(std::FILE* log, const TrainConfig& c, const nlohmann::json& strategy) {
  if (c.strategy.type == StrategyType::kHogwild) {
    std::fprintf(
        log, "%s\n",
        fmt::format("Hogwild with {} worker{}, locking {}: {} updates, {} applied, {} lost", c.strategy.workers,
                    c.strategy.workers == 1 ? "" : "s", strategy.at("locking").get<std::string>(),
                    thousands(strategy.at("updates_expected").get<std::int64_t>()),
                    thousands(strategy.at("updates_applied").get<std::int64_t>()),
                    thousands(strategy.at("lost_updates").get<std::int64_t>()))
            .c_str());
  } else if (strategy.at("replicas").get<int>() > 1) {
    const auto& ar = strategy.at("all_reduce");
    const double step = strategy.at("step_seconds").get<double>();
    const double reduce = ar.at("seconds_per_step").get<double>();
    const bool mirrored = c.strategy.type == StrategyType::kMirrored;
    std::fprintf(log, "%s\n",
                 fmt::format("{} over {} {}: all-reduce of {} per step in {:.3f} ms ({:.0f}% of a {:.3f} ms step)",
                             mirrored ? "Mirrored" : "Multi-worker", strategy.at("replicas").get<int>(),
                             mirrored ? "replicas" : "workers", human_bytes(ar.at("bytes_per_step").get<double>()),
                             reduce * 1e3, step > 0 ? 100.0 * reduce / step : 0.0, step * 1e3)
                     .c_str());
  }
}

// The figures of a fold's split ("validation", "test") in its summary, in `names`' order; NaN where missing.
std::vector<double> fold_figures(const nlohmann::json& summary, const std::vector<std::string>& names) {
  std::vector<double> out;
  for (const std::string& name : names) {
    const std::string split = name.substr(0, name.find(' ')), figure = name.substr(name.find(' ') + 1);
    const nlohmann::json& part = summary.contains(split) ? summary.at(split) : nlohmann::json();
    out.push_back(part.is_object() && part.contains(figure) ? part.at(figure).get<double>() : std::nan(""));
  }
  return out;
}

// The folds' table with a mean and a (population) standard deviation row, and folds.csv and folds.json in
// `dir`.
void report_folds(std::FILE* log, const std::filesystem::path& dir, const std::vector<std::string>& names,
                  const std::vector<std::vector<double>>& figures, bool json) {
  const auto k = static_cast<double>(figures.size());
  std::vector<double> mean(names.size(), 0.0), deviation(names.size(), 0.0);
  for (const auto& row : figures)
    for (std::size_t j = 0; j < names.size(); ++j) mean[j] += row[j] / k;
  for (const auto& row : figures)
    for (std::size_t j = 0; j < names.size(); ++j) deviation[j] += (row[j] - mean[j]) * (row[j] - mean[j]) / k;
  for (double& d : deviation) d = std::sqrt(d);
  std::vector<TableColumn> columns{{"fold"}};
  for (const std::string& n : names) columns.push_back({n, true});
  std::vector<std::vector<std::string>> rows;
  std::string csv = "fold";
  for (const std::string& n : names) csv += "," + n;
  csv += "\n";
  nlohmann::json j{
      {"folds", nlohmann::json::array()}, {"mean", nlohmann::json::object()}, {"std", nlohmann::json::object()}};
  auto add_row = [&](const std::string& label, const std::vector<double>& values) {
    std::vector<std::string> row{label};
    csv += label;
    for (double v : values) {
      row.push_back(fmt::format("{:.4f}", v));
      csv += fmt::format(",{}", v);
    }
    csv += "\n";
    rows.push_back(std::move(row));
  };
  for (std::size_t i = 0; i < figures.size(); ++i) {
    add_row(std::to_string(i + 1), figures[i]);
    nlohmann::json fold{{"fold", i + 1}};
    for (std::size_t c = 0; c < names.size(); ++c) fold[names[c]] = figures[i][c];
    j["folds"].push_back(fold);
  }
  add_row("mean", mean);
  add_row("std", deviation);
  for (std::size_t c = 0; c < names.size(); ++c) {
    j["mean"][names[c]] = mean[c];
    j["std"][names[c]] = deviation[c];
  }
  write_file_atomic(dir / "folds.csv", csv);
  write_file_atomic(dir / "folds.json", j.dump(2) + "\n");
  if (json)
    std::printf("%s\n", j.dump(2).c_str());
  else
    std::fprintf(log, "%s", table_for_output(columns, rows).c_str());
}

// What --folds K --resume DIR continues: a folder holding fold-k runs, not a run itself.
void check_folds_folder(const std::string& dir, std::int64_t folds) {
  if (RunLayout(dir).holds_run(RunEvidence::kAnyMarker))
    throw SpecError(
        "", "--resume",
        dir + " is one run; with --folds, --resume takes the folder holding fold-1 to fold-" + std::to_string(folds));
  std::error_code ec;
  for (std::int64_t k = 1; k <= folds; ++k)
    if (std::filesystem::exists(std::filesystem::path(dir) / fmt::format("fold-{}", k), ec)) return;
  throw SpecError("", "--resume", fmt::format("{} holds none of fold-1 to fold-{} to continue", dir, folds));
}

// train --folds K: K runs, fold k of K the validation rows of run `fold-k` in the config's output folder,
// then the folds' figures side by side with their mean and deviation.
int run_folds(const TrainFlags& f) {
  // With --resume DIR, DIR is the folds' folder: each fold with a checkpoint continues (a finished one gives
  // its figures again after its config is checked against it), the others train.
  const TrainConfig base = config_with_flags(f);
  if (f.resume) check_folds_folder(base.output, *f.folds);
  if (base.strategy.type == StrategyType::kMultiWorker)
    throw SpecError("", "--folds", "a multi-worker run trains one fold at a time: give --set data.folds and data.fold");
  std::FILE* log = f.json ? stderr : stdout;
  std::vector<std::string> names;
  for (const char* split : {"validation", "test"}) {
    if (std::string(split) == "test" && base.data.test_split == 0) continue;
    names.push_back(std::string(split) + " loss");
    for (const std::string& m : base.metrics) names.push_back(std::string(split) + " " + m);
  }
  std::vector<std::vector<double>> figures;
  StopSignalGuard stop_signals;
  for (std::int64_t k = 1; k <= *f.folds; ++k) {
    TrainConfig c = base;
    c.data.folds = *f.folds;
    c.data.fold = k;
    c.output = (std::filesystem::path(base.output) / fmt::format("fold-{}", k)).string();
    TrainControl control;
    control.overwrite = f.overwrite;
    control.interrupt = &g_interrupted;
    std::error_code ec;
    if (f.resume && std::filesystem::exists(RunLayout(c.output).checkpoint(), ec)) control.resume = c.output;
    const TrainOutcome out = train_and_save(c, {}, {}, control);
    if (out.interrupted_at) {
      const int sig = g_signal.load() == 0 ? SIGINT : g_signal.load();
      std::fprintf(log, "\n%s: fold %lld of %lld; its checkpoint is in %s\n", stop_text(sig), static_cast<long long>(k),
                   static_cast<long long>(*f.folds), printable_line(c.output).c_str());
      std::fprintf(log, "Resume with: %s --folds %lld\n", printable_line(resume_command(f, base.output)).c_str(),
                   static_cast<long long>(*f.folds));
      return 128 + sig;
    }
    figures.push_back(fold_figures(out.summary, names));
    if (!f.quiet)
      std::fprintf(log, "Fold %lld/%lld: %s %.4f (%s)\n", static_cast<long long>(k), static_cast<long long>(*f.folds),
                   names.front().c_str(), figures.back().front(), printable_line(c.output).c_str());
  }
  report_folds(log, base.output, names, figures, f.json);
  return 0;
}

int run_train(const TrainFlags& f) {
  if (f.folds) return run_folds(f);
  TrainConfig c = config_with_flags(f);
  // Multi-worker: rank 0 speaks for the job; the other ranks print nothing but their errors.
  const auto launch = mpi_launch();
  const bool silent_worker = c.strategy.type == StrategyType::kMultiWorker && launch && launch->rank != 0;
  // With --json, stdout carries only the JSON document; progress goes to stderr.
  std::FILE* log = f.json ? stderr : stdout;
  ProgressPrinter progress(log, c.epochs);
  Trainer::EpochCallback on_epoch;
  Trainer::StepCallback on_step;
  if (!f.quiet && !silent_worker) {
    on_epoch = [&](const EpochResult& r) { progress.on_epoch(r); };
    on_step = [&](std::int64_t s, std::int64_t n, const MetricValues& m) { progress.on_step(s, n, m); };
  }
  TrainControl control;
  if (f.resume) control.resume = *f.resume;
  control.overwrite = f.overwrite;
  control.interrupt = &g_interrupted;
  control.on_start = [&](std::int64_t epoch) { progress.start_at(epoch); };
  control.on_placement_warnings = [&](const std::vector<std::string>& warnings) {
    if (!silent_worker) print_placement_warnings(warnings, "--log-device-placement lists every node");
  };
  control.on_message = [&](const std::string& line) {
    if (!f.quiet && !silent_worker) std::fprintf(log, "%s\n", line.c_str());
  };
  StopSignalGuard stop_signals;
  TrainOutcome out = train_and_save(c, on_epoch, on_step, control);
  // 130 after SIGINT, 143 after SIGTERM, 129 after SIGHUP, as a shell reports a process the signal ended
  // (130 also for a worker that stopped on another rank's vote, having had no signal of its own).
  const int sig = g_signal.load() == 0 ? SIGINT : g_signal.load();
  const int stopped_status = 128 + sig;
  if (silent_worker) return out.interrupted_at ? stopped_status : 0;
  if (out.interrupted_at) {
    const auto& at = *out.interrupted_at;
    std::fprintf(log, "\n%s: epoch %lld, %lld steps done; checkpoint written to %s\n", stop_text(sig),
                 static_cast<long long>(at.epoch), static_cast<long long>(at.steps_done),
                 printable_line(RunLayout(c.output).checkpoint().string()).c_str());
    std::fprintf(log, "Resume with: %s\n", printable_line(resume_command(f, c.output)).c_str());
    return stopped_status;
  }
  if (f.json) {
    std::printf("%s\n", out.summary.dump(2).c_str());
    return 0;
  }
  if (!out.test.empty()) std::fprintf(log, "Test%s\n", metrics_text(out.test).c_str());
  std::fprintf(log, "%s\n",
               printable_line(fmt::format("Trained {} for {} in {:.2f}s ({} samples/s); run saved to {}",
                                          c.model_spec.value("name", "model"), epochs_text(out), out.seconds,
                                          thousands(static_cast<std::int64_t>(out.samples_per_second)), c.output))
                   .c_str());
  print_strategy_line(log, c, out.summary.at("strategy"));
  return 0;
}

void define_flags(CLI::App& cmd, TrainFlags& flags) {
  cmd.add_option("config", flags.config, "Train config (JSON)")->required()->check(non_empty("a train config"));
  cmd.add_option("--epochs", flags.epochs,
                 "Override the number of epochs (0: train no step; evaluate and save the starting weights)")
      ->check(non_negative_integer());
  cmd.add_option("--batch-size", flags.batch_size, "Override the batch size")->check(positive_integer());
  cmd.add_option("--seed", flags.seed, "Override the seed")->check(non_negative_integer());
  cmd.add_option("--inter-op-threads", flags.inter_op, "Threads running independent graph nodes (0: one per core)")
      ->check(integer_in(0, 1024));
  cmd.add_option("--intra-op-threads", flags.intra_op, "Threads splitting the work inside one op (0: one per core)")
      ->check(integer_in(0, 1024));
  cmd.add_option("--data-threads", flags.data_threads,
                 "Threads reading the data: parsing a CSV, decoding images (0: one per core)")
      ->check(integer_in(0, 1024));
  cmd.add_option("--folds", flags.folds,
                 "Cross-validation: K runs in the output folder (fold-1, ...), each validating on one fold of the rows "
                 "the test split leaves (stratified by class), then their figures' mean and deviation")
      ->check(integer_in(2, 1000));
  // One value an occurrence, so `--set a=1 config.json` leaves the config to its place.
  cmd.add_option(
         "--set", flags.set,
         "Change one key of the config or its model spec, KEY=VALUE (repeatable): optimizer.learning_rate=3e-4, "
         "layers[1].units=64; the value is JSON, or else a string")
      ->allow_extra_args(false);
  cmd.add_option("--output", flags.output, "Run directory to write (default from the config, else runs/<config name>)");
  cmd.add_option("--resume", flags.resume,
                 "Continue the run in this directory from its checkpoint, up to the epochs asked (only --epochs, the "
                 "thread counts, prefetch, checkpoint_seconds and output flags may differ from the run's)");
  cmd.add_flag("--overwrite", flags.overwrite,
               "Train into a run directory that holds another run, deleting that run's files first (without it, a "
               "non-empty run directory is refused)");
  cmd.add_option("--device", flags.device, "Default device for every layer: cpu, cuda, cuda:N, sim, sim:N")
      ->check(device_name());
  cmd.add_option("--precision", flags.precision,
                 "Precision policy, as the config's \"precision\": float32, mixed_bfloat16 or mixed_float16 (dynamic "
                 "loss scaling)")
      ->check(CLI::IsMember(precision_names()));
  cmd.add_flag("--json", flags.json, "Print the final summary as JSON on stdout (progress goes to stderr)");
  cmd.add_flag("--quiet", flags.quiet, "No progress output");
  cmd.add_flag(
      "--strict-placement", flags.strict_placement,
      "Refuse (exit 2) a node whose device is missing or has no kernel for its op, instead of running it on the cpu");
  cmd.add_flag(
      "--log-device-placement", flags.log_device_placement,
      "Print every node of each graph the run prepares, with its op and the device it runs on, copies included");
  cmd.add_flag("--keep-denormals", flags.keep_denormals,
               "Compute with denormal floats instead of flushing them to zero (slower; to compare results)");
}

}  // namespace

Command add_train_command(CLI::App& app) {
  return add_command<TrainFlags>(app, "train", "Train a model from a train config and write its run directory",
                                 define_flags, run_train);
}

}  // namespace tctl::app
