// tensorctl profile CONFIG|MODEL: where the time of a training step goes, per layer and per op, and what
// the thread settings buy.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>

#include "app/commands.h"
#include "app/flag_checks.h"
#include "app/scenarios/profiling.h"
#include "app/terminal.h"
#include "core/errors.h"
#include "core/text.h"
#include "models/io/atomic_file.h"
#include "models/io/spec_reader.h"
#include "models/nn/sequential.h"
#include "models/record/config_override.h"
#include "models/record/precision.h"
#include "models/run/output_check.h"
#include "models/train/model_builder.h"

namespace tctl::app {

namespace {

// Where the tables and notes go: stdout, or stderr when the trace takes stdout (--trace -), which must stay
// one JSON document.
std::FILE* report_stream = stdout;
struct ProfileFlags {
  std::string path;
  std::string inter = "1";
  std::string intra = "1";
  std::string mode = "traced";
  std::string trace;
  std::string loss;
  std::optional<std::string> precision;
  ProfileOptions options;
  bool ops = false;
  bool json = false;
};

std::vector<int> thread_list(const std::string& text, const std::string& flag) {
  std::vector<int> out;
  for (const std::string& item : split_at_commas(text)) {
    int n = 0;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), n);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || n < 1 || n > 256)
      throw SpecError("", flag, "expected a comma-separated list of thread counts from 1 to 256, got \"" + text + "\"");
    out.push_back(n);
  }
  return out;
}

const char* mode_name(const ProfileReport& r) { return r.eager ? "eager" : "traced"; }

std::string ms(double us) { return fmt::format("{:.3f}", us / 1000.0); }
std::string ms_range(const TimeStats& t) {
  if (t.max == 0) return "-";
  return fmt::format("{:.3f} [{:.3f}-{:.3f}]", t.median / 1000.0, t.min / 1000.0, t.max / 1000.0);
}

// The gather's share of a step with its gather, what a loop that gathers inline spends waiting for data.
double input_share(const ProfileReport& r) {
  const double total = r.input.median + r.unprofiled.median;
  return total > 0 ? r.input.median / total : 0.0;
}

nlohmann::json stats_json(const TimeStats& t) {
  return {{"median_ms", t.median / 1000}, {"min_ms", t.min / 1000}, {"max_ms", t.max / 1000}};
}

// One row of the per-layer table; the device column only where some work ran on a device with a stream.
std::vector<std::string> layer_row(const ProfileReport& r, const LayerProfile& l, bool device) {
  const double total = l.forward.median + l.backward.median;
  const double gflops = total > 0 ? l.flops / (total * 1e3) : 0;
  std::vector<std::string> row{l.type.empty() ? l.name : l.name + " (" + l.type + ")",
                               l.output_shape,
                               l.type.empty() ? "" : thousands(l.params),
                               ms_range(l.forward),
                               ms_range(l.backward),
                               fmt::format("{:.1f}%", 100.0 * total / r.step.median),
                               l.flops > 0 ? fmt::format("{:.2f}", l.flops / 1e6) : "",
                               l.flops > 0 ? fmt::format("{:.1f}", gflops) : ""};
  if (device) row.insert(row.begin() + 5, ms_range(l.device));
  return row;
}

std::vector<std::string> op_row(const ProfileReport& r, const OpProfile& o, bool device) {
  std::vector<std::string> row{"  " + o.name,
                               o.op,
                               o.phase,
                               o.phase == "forward" ? ms(o.time.median) : "",
                               o.phase == "forward" ? "" : ms(o.time.median),
                               fmt::format("{:.1f}%", 100.0 * o.time.median / r.step.median),
                               "",
                               ""};
  if (device) row.insert(row.begin() + 5, o.device.max > 0 ? ms(o.device.median) : "");
  return row;
}

void print_table(const ProfileReport& r, bool ops) {
  const bool device = !r.streams.empty();
  // Each layer's ops in report order, found by name: a scan of every op per layer took minutes for a long model.
  std::unordered_map<std::string, std::vector<const OpProfile*>> layer_ops;
  if (ops)
    for (const auto& o : r.ops) layer_ops[o.layer.empty() ? "(graph)" : o.layer].push_back(&o);
  std::vector<std::vector<std::string>> rows;
  for (const auto& l : r.layers) {
    rows.push_back(layer_row(r, l, device));
    if (auto it = layer_ops.find(l.name); it != layer_ops.end())
      for (const OpProfile* o : it->second) rows.push_back(op_row(r, *o, device));
  }
  // On a narrow terminal the ranges go first, then the figures one can work out from the others.
  std::vector<TableColumn> columns{{"Layer (type)"},
                                   {"Output Shape", false, 3},
                                   {"Param #", true, 4},
                                   {"forward ms [min-max]", true, 0, " ["},
                                   {"backward ms [min-max]", true, 0, " ["},
                                   {"share", true},
                                   {"MFLOP", true, 5},
                                   {"GFLOP/s", true, 6}};
  if (device) columns.insert(columns.begin() + 5, {"device ms [min-max]", true, 2, " ["});
  // Forward only: no backward column.
  bool backward = false;
  for (const auto& l : r.layers) backward |= l.backward.max > 0;
  if (!backward) {
    columns.erase(columns.begin() + 4);
    for (auto& row : rows) row.erase(row.begin() + 4);
  }
  std::fprintf(report_stream, "%s", table_for_output(columns, rows).c_str());
  for (const StreamProfile& s : r.streams)
    std::fprintf(report_stream,
                 "%s stream busy %s ms [%s-%s] per step (%.1f%% of the step), timed with its events; forward and "
                 "backward ms are host time, queueing the work\n",
                 s.device.c_str(), ms(s.busy.median).c_str(), ms(s.busy.min).c_str(), ms(s.busy.max).c_str(),
                 100.0 * s.busy.median / r.step.median);
}

void print_layers(const ProfileReport& r, bool ops) {
  print_table(r, ops);
  double layer_sum = 0;
  for (const auto& l : r.layers) layer_sum += l.forward.median + l.backward.median;
  std::fprintf(
      report_stream,
      "step %s ms [%s-%s] profiled (median [min-max] of the wall time); %s ms without the profiler (%+.1f%%), %s "
      "samples/s\n",
      ms(r.step.median).c_str(), ms(r.step.min).c_str(), ms(r.step.max).c_str(), ms(r.unprofiled.median).c_str(),
      100.0 * (r.step.median - r.unprofiled.median) / r.unprofiled.median,
      thousands(static_cast<std::int64_t>(r.samples_per_second)).c_str());
  if (layer_sum > r.step.median) {
    // Concurrent nodes: more kernel time than wall time.
    std::fprintf(report_stream,
                 "kernels %s ms ran in a %s ms step: %.2fx overlap from nodes running at the same time\n",
                 ms(layer_sum).c_str(), ms(r.step.median).c_str(), layer_sum / r.step.median);
  } else {
    std::fprintf(report_stream, "kernels %s ms, outside kernels (%s) %s ms = %.1f%% of the step\n",
                 ms(layer_sum).c_str(),
                 r.eager ? "tracing each op, dispatch and allocation" : "executor and session overhead",
                 ms(r.step.median - layer_sum).c_str(), 100.0 * (r.step.median - layer_sum) / r.step.median);
  }
  if (!r.has_input) return;
  // The step times above leave the gather out; its share is of a step and its gather together, what a loop
  // that gathers inline spends.
  std::fprintf(report_stream,
               "input: gathering a batch %s ms [%s-%s] = %.1f%% of a step with its gather; preparing the data (read, "
               "decode, split, scale) took %.2f s once\n",
               ms(r.input.median).c_str(), ms(r.input.min).c_str(), ms(r.input.max).c_str(), 100.0 * input_share(r),
               r.prepare_seconds);
}

// Every report as JSON, in the order measured.
nlohmann::json reports_json(const std::vector<ProfileReport>& reports) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : reports) {
    nlohmann::json layers = nlohmann::json::array();
    for (const auto& l : r.layers)
      layers.push_back({{"name", l.name},
                        {"type", l.type},
                        {"output_shape", l.output_shape},
                        {"params", l.params},
                        {"forward", stats_json(l.forward)},
                        {"backward", stats_json(l.backward)},
                        {"flops", l.flops}});
    nlohmann::json ops = nlohmann::json::array();
    for (const auto& o : r.ops)
      ops.push_back(
          {{"name", o.name}, {"op", o.op}, {"layer", o.layer}, {"phase", o.phase}, {"time", stats_json(o.time)}});
    // Device times only where some work ran on a device with a stream: a host-only report is as it was.
    if (!r.streams.empty()) {
      for (std::size_t i = 0; i < r.layers.size(); ++i) layers[i]["device"] = stats_json(r.layers[i].device);
      for (std::size_t i = 0; i < r.ops.size(); ++i) ops[i]["device"] = stats_json(r.ops[i].device);
    }
    out.push_back({{"mode", mode_name(r)},
                   {"inter_op_threads", r.inter_op_threads},
                   {"intra_op_threads", r.intra_op_threads},
                   {"step", stats_json(r.step)},
                   {"unprofiled_step", stats_json(r.unprofiled)},
                   {"kernels", stats_json(r.kernels)},
                   {"samples_per_second", r.samples_per_second},
                   {"layers", layers},
                   {"ops", ops}});
    if (r.has_input)
      out.back()["input"] = {
          {"batch", stats_json(r.input)}, {"share", input_share(r)}, {"prepare_seconds", r.prepare_seconds}};
    if (r.streams.empty()) continue;
    nlohmann::json streams = nlohmann::json::array();
    for (const StreamProfile& s : r.streams) streams.push_back({{"device", s.device}, {"busy", stats_json(s.busy)}});
    out.back()["streams"] = streams;
  }
  return out;
}

// The sweep's summary table: one row per mode and thread counts, with the speed-up over the first.
void print_sweep(const std::vector<ProfileReport>& reports, bool both_modes) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : reports)
    rows.push_back({mode_name(r), std::to_string(r.inter_op_threads), std::to_string(r.intra_op_threads),
                    ms(r.unprofiled.median), thousands(static_cast<std::int64_t>(r.samples_per_second)),
                    fmt::format("{:.2f}x", reports[0].unprofiled.median / r.unprofiled.median)});
  std::fprintf(report_stream, "\n%s (step time without the profiler; speed-up over %s inter %d x intra %d):\n",
               both_modes ? "Eager and traced side by side" : "Thread sweep", mode_name(reports[0]),
               reports[0].inter_op_threads, reports[0].intra_op_threads);
  std::fprintf(report_stream, "%s",
               table_for_output({{"mode"},
                                 {"inter-op", true},
                                 {"intra-op", true},
                                 {"step ms", true, 1},
                                 {"samples/s", true},
                                 {"speed-up", true}},
                                rows)
                   .c_str());
}

// A model spec names no loss: a forward-only profile builds none, and a training profile takes the default
// (sparse categorical cross-entropy) where it fits the model's output, or else runs forward only and says so.
// Sets the config's loss and the options' forward_only; returns whether the profile fell back to forward only.
bool choose_loss(const ProfileFlags& f, TrainConfig& config, ProfileOptions& options) {
  bool no_loss = false;
  if (!f.loss.empty()) {
    const auto& known = loss_names();
    if (std::find(known.begin(), known.end(), f.loss) == known.end())
      throw SpecError("", "--loss", "unknown loss \"" + f.loss + "\" (known: " + join(known) + ")");
    config.loss = f.loss;
    config.metrics.clear();
  } else if (config.spec_only) {
    config.metrics.clear();
    no_loss = options.forward_only || !loss_fits_model(config);
  }
  const bool fell_back = no_loss && !options.forward_only;
  if (no_loss) {
    config.loss.clear();
    options.forward_only = true;
  }
  return fell_back;
}

// `config` at `precision`, as `train --precision` sets it: a train config read again with the key overridden
// (so a conflict is the key's error), a model spec's defaults with the policy set.
TrainConfig with_precision(TrainConfig config, const std::string& precision) {
  if (!config.spec_only) return load_train_config(config.file, std::vector{parse_override("precision=" + precision)});
  config.set_precision(precision);
  return config;
}

// Every configuration of the sweep profiled, by mode, then inter-op, then intra-op threads.
std::vector<ProfileReport> profile_sweep(const TrainConfig& config, const ProfileOptions& options,
                                         const std::vector<bool>& eager_modes, const std::vector<int>& inters,
                                         const std::vector<int>& intras) {
  std::vector<ProfileReport> reports;
  StatusLine status;
  const std::size_t runs = eager_modes.size() * inters.size() * intras.size();
  for (bool eager : eager_modes) {
    for (int inter : inters) {
      for (int intra : intras) {
        ProfileOptions o = options;
        o.inter_op_threads = inter;
        o.intra_op_threads = intra;
        o.eager = eager;
        status.show(reports.size() + 1, runs,
                    fmt::format("profiling {}, inter-op {}, intra-op {}", eager ? "eager" : "traced", inter, intra));
        reports.push_back(profile_training(config, o));
      }
    }
  }
  status.clear();
  return reports;
}

int run_profile(const ProfileFlags& f) {
  if (f.mode != "traced" && f.mode != "eager" && f.mode != "both")
    throw SpecError("", "--mode", "unknown mode \"" + f.mode + "\" (known: traced, eager, both)");
  std::vector<bool> eager_modes;
  if (f.mode != "eager") eager_modes.push_back(false);
  if (f.mode != "traced") eager_modes.push_back(true);
  const auto inters = thread_list(f.inter, "--inter-op-threads");
  const auto intras = thread_list(f.intra, "--intra-op-threads");
  if (!f.trace.empty()) check_output_path(f.trace, "--trace");
  if (f.trace == "-" && f.json)
    throw SpecError("", "--trace", "--trace - and --json both write to standard output; give the trace a file");
  report_stream = f.trace == "-" ? stderr : stdout;
  TrainConfig config = load_model_file(f.path);
  check_output_keeps_inputs(f.trace, "--trace", config.input_files());  // f.path among them
  if (f.precision) config = with_precision(std::move(config), *f.precision);
  ProfileOptions options = f.options;
  const bool fell_back = choose_loss(f, config, options);
  check_training_memory(Sequential::check(config.model_spec, config.model_file, config.model_path), options.batch_size,
                        config.optimizer.slots_per_weight(), "", "--batch-size");

  const std::vector<ProfileReport> reports = profile_sweep(config, options, eager_modes, inters, intras);
  print_placement_warnings(reports.front().placement_warnings);
  // The detailed table and the trace show the last configuration of the first mode (traced, unless only
  // eager was asked for).
  const ProfileReport& last = reports[reports.size() / eager_modes.size() - 1];
  if (!f.trace.empty()) {
    TraceOptions t;
    t.process_name = "tensorctl " + std::string(options.forward_only ? "forward" : "training") + " step";
    t.spans = last.trace_spans;
    write_file_atomic(f.trace, chrome_trace_json(last.last_events, t));
  }
  if (f.json) {
    std::fprintf(report_stream, "%s\n",
                 nlohmann::json{{"model", f.path},
                                {"batch_size", options.batch_size},
                                {"forward_only", options.forward_only},
                                {"loss", config.loss.empty() ? nlohmann::json() : nlohmann::json(config.loss)},
                                {"precision", config.precision},
                                {"runs", reports_json(reports)}}
                     .dump(2)
                     .c_str());
    return 0;
  }
  if (const std::string note = precision_note(config.precision, config.device); !note.empty())
    std::fprintf(report_stream, "%s\n", note.c_str());
  for (std::size_t m = 0; m < eager_modes.size(); ++m) {
    const ProfileReport& r = reports[(m + 1) * reports.size() / eager_modes.size() - 1];
    std::fprintf(
        report_stream,
        "%sProfile of %s: batch %lld, %lld iterations after %lld warm-up, %s, %s, inter-op %d, intra-op %d%s\n",
        m > 0 ? "\n" : "", printable_line(f.path).c_str(), static_cast<long long>(options.batch_size),
        static_cast<long long>(options.iterations), static_cast<long long>(options.warmup),
        fell_back              ? "forward only (the default loss does not fit this model's output; --loss NAME "
                                 "profiles training)"
        : options.forward_only ? "forward only"
                               : "training step",
        mode_name(r), r.inter_op_threads, r.intra_op_threads,
        config.precision == "float32" ? "" : (", " + config.precision).c_str());
    print_layers(r, f.ops);
  }
  if (reports.size() > 1) print_sweep(reports, eager_modes.size() > 1);
  if (!f.trace.empty())
    std::fprintf(report_stream, "trace of the last configuration written to %s (open it in Perfetto)\n",
                 (f.trace == "-" ? std::string("standard output") : printable_line(f.trace)).c_str());
  return 0;
}

// The most measured and warm-up steps. Each measured step keeps its times for the medians, about 20 bytes per
// graph node (0.8 KB for the digits MLP), so --iterations 1000000000000 grew until memory ran out; a
// million steps of the digits MLP take minutes and hold under 1 GB, and its medians no longer move. The
// bound also keeps the step count, twice the measured steps plus the warm-up, far from 2^63.
constexpr std::int64_t kMaxSteps = 1000000;

void define_flags(CLI::App& cmd, ProfileFlags& f) {
  cmd.add_option("config", f.path, "Train config, or a model spec (profiled on random inputs)")
      ->required()
      ->check(non_empty("a train config or a model spec"));
  cmd.add_option("--batch-size", f.options.batch_size, "Batch size")->check(positive_integer());
  cmd.add_option("--iterations", f.options.iterations, "Measured steps")->check(integer_in(1, kMaxSteps));
  cmd.add_option("--warmup", f.options.warmup, "Steps run before measuring")->check(integer_in(0, kMaxSteps));
  cmd.add_option("--inter-op-threads", f.inter, "Inter-op thread counts, a comma list for a sweep (default 1)");
  cmd.add_option("--intra-op-threads", f.intra, "Intra-op thread counts, a comma list for a sweep (default 1)");
  cmd.add_option("--mode", f.mode, "traced (one graph per step, the default), eager (op by op), or both side by side");
  cmd.add_flag("--forward-only", f.options.forward_only, "Profile inference only");
  cmd.add_option("--precision", f.precision,
                 "Precision policy, as a config's \"precision\": float32, mixed_bfloat16 or mixed_float16")
      ->check(CLI::IsMember(precision_names()));
  cmd.add_option("--loss", f.loss,
                 "The loss of the training step (a model spec names none: without this, the default loss where it fits "
                 "the model's output, else forward only)")
      ->check(non_empty("a loss name"));
  cmd.add_flag("--ops", f.ops, "Break each layer into its graph nodes");
  cmd.add_option("--trace", f.trace, "Write a Chrome trace (Perfetto) of the last measured step")->check(output_path());
  cmd.add_flag("--json", f.json, "Print the report as JSON");
}

}  // namespace

Command add_profile_command(CLI::App& app) {
  return add_command<ProfileFlags>(app, "profile", "Time a training step per layer and per op, across thread counts",
                                   define_flags, run_profile);
}

}  // namespace tctl::app
