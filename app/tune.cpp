// tensorctl tune CONFIG: the training step measured under the inter-op and intra-op thread counts that fit
// the machine (their product at most its cores), the fastest written into a copy of the config with the
// measured table beside it: profile's thread sweep turned into a decision.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "app/commands.h"
#include "app/flag_checks.h"
#include "app/scenarios/profiling.h"
#include "app/terminal.h"
#include "core/errors.h"
#include "core/thread_pool.h"
#include "models/io/atomic_file.h"
#include "models/io/spec_reader.h"
#include "models/record/train_config.h"
#include "models/run/output_check.h"

namespace tctl::app {

namespace {

namespace fs = std::filesystem;

struct TuneFlags {
  std::string config;
  double budget = 10.0;
  int cores = 0;
  std::string output;
};

struct Setting {
  int inter = 1, intra = 1;
  double step_us = 0.0, samples_per_second = 0.0;
};

// 1, 2, 4, ... up to `cores`, and `cores` itself.
std::vector<int> counts_up_to(int cores) {
  std::vector<int> out;
  for (int n = 1; n < cores; n *= 2) out.push_back(n);
  out.push_back(cores);
  return out;
}

// Every (inter-op, intra-op) pair of those counts whose threads fit the cores, and the config's own
// (0 read as one per core), first.
std::vector<Setting> candidates(const TrainConfig& c, int cores) {
  const int inter = c.inter_op_threads > 0 ? c.inter_op_threads : cores;
  const int intra = c.intra_op_threads > 0 ? c.intra_op_threads : cores;
  std::vector<Setting> out{{inter, intra}};
  for (const int a : counts_up_to(cores))
    for (const int b : counts_up_to(cores))
      if (a * b <= cores && !(a == inter && b == intra)) out.push_back({a, b});
  return out;
}

// A relative path of the config's, the same file seen from `to` (the copy's folder).
std::string rebased(const std::string& path, const fs::path& from, const fs::path& to) {
  if (path.empty() || fs::path(path).is_absolute()) return path;
  const fs::path target = fs::absolute(from / path).lexically_normal();
  return target.lexically_relative(fs::absolute(to).lexically_normal()).string();
}

// The config file's JSON with its relative paths seen from the copy's folder and the threads chosen.
nlohmann::json tuned_copy(nlohmann::json doc, const fs::path& from, const fs::path& to, const Setting& best) {
  auto rebase = [&](nlohmann::json& object, const char* key) {
    if (object.is_object() && object.contains(key) && object[key].is_string())
      object[key] = rebased(object[key].get<std::string>(), from, to);
  };
  rebase(doc, "model");
  if (doc.contains("data") && doc["data"].is_object()) {
    for (const char* key : {"csv", "x", "y", "cache"}) rebase(doc["data"], key);
    if (doc["data"].contains("images")) rebase(doc["data"]["images"], "directory");
  }
  if (!doc.contains("threads") || !doc["threads"].is_object()) doc["threads"] = nlohmann::json::object();
  doc["threads"]["inter_op"] = best.inter;
  doc["threads"]["intra_op"] = best.intra;
  return doc;
}

// Measures each setting for an equal share of the budget: a few steps first give the step's time, from
// which the steps that fill the share follow (at least 10, each profiled once and run once without).
void measure(const TrainConfig& c, std::vector<Setting>& settings, double budget) {
  ProfileOptions probe;
  probe.batch_size = c.batch_size;
  probe.iterations = 5;
  probe.warmup = 2;
  probe.inter_op_threads = settings[0].inter;
  probe.intra_op_threads = settings[0].intra;
  const double step_seconds = std::max(profile_training(c, probe).unprofiled.median * 1e-6, 1e-7);
  // Each measured iteration runs the step twice (once profiled, once not).
  const double per_setting = budget / static_cast<double>(settings.size());
  const auto iterations = static_cast<std::int64_t>(std::clamp(per_setting / step_seconds / 2.0, 10.0, 20000.0));
  StatusLine status;
  for (std::size_t i = 0; i < settings.size(); ++i) {
    Setting& s = settings[i];
    status.show(i + 1, settings.size(), fmt::format("measuring inter-op {}, intra-op {}", s.inter, s.intra));
    ProfileOptions o = probe;
    o.iterations = iterations;
    o.warmup = 3;
    o.inter_op_threads = s.inter;
    o.intra_op_threads = s.intra;
    const ProfileReport r = profile_training(c, o);
    s.step_us = r.unprofiled.median;
    s.samples_per_second = r.samples_per_second;
  }
  status.clear();
}

std::string table_csv(const std::vector<Setting>& settings) {
  std::string csv = "inter_op,intra_op,step_ms,samples_per_second,speed_up\n";
  for (const Setting& s : settings)
    csv += fmt::format("{},{},{:.6f},{:.1f},{:.4f}\n", s.inter, s.intra, s.step_us / 1000.0, s.samples_per_second,
                       settings[0].step_us / s.step_us);
  return csv;
}

int run_tune(const TuneFlags& f) {
  if (!(f.budget > 0.0 && f.budget <= 86400.0))
    throw SpecError("", "--budget", fmt::format("expected seconds in (0, 86400], got {:g}", f.budget));
  const fs::path out = f.output.empty() ? fs::path(f.config).replace_extension(".tuned.json") : fs::path(f.output);
  if (out.extension() != ".json")
    throw SpecError("", "-o", fmt::format("{}: the tuned config is JSON; name a file ending in .json", out.string()));
  std::error_code ec;
  if (fs::equivalent(out, f.config, ec))
    throw SpecError("", "-o", out.string() + " is the config itself; name another file for the tuned copy");
  const nlohmann::json doc = parse_json_file(f.config);
  const TrainConfig c = TrainConfig::from_json(doc, f.config);
  check_output_keeps_inputs(out.string(), "-o", c.input_files());
  const int cores = f.cores > 0 ? f.cores : ThreadPool::hardware_threads();
  std::vector<Setting> settings = candidates(c, cores);
  measure(c, settings, f.budget);
  const auto best = std::min_element(settings.begin(), settings.end(),
                                     [](const Setting& a, const Setting& b) { return a.step_us < b.step_us; });
  std::vector<std::vector<std::string>> rows;
  for (const Setting& s : settings)
    rows.push_back({std::to_string(s.inter), std::to_string(s.intra), fmt::format("{:.3f}", s.step_us / 1000.0),
                    thousands(static_cast<std::int64_t>(s.samples_per_second)),
                    fmt::format("{:.2f}x", settings[0].step_us / s.step_us),
                    &s == &*best         ? "fastest"
                    : &s == &settings[0] ? "the config's"
                                         : ""});
  std::printf(
      "Training step of %s, batch %lld, on %d cores (speed-up over the config's threads, inter-op %d x "
      "intra-op %d):\n",
      f.config.c_str(), static_cast<long long>(c.batch_size), cores, settings[0].inter, settings[0].intra);
  std::printf(
      "%s",
      table_for_output(
          {{"inter-op", true}, {"intra-op", true}, {"step ms", true}, {"samples/s", true}, {"speed-up", true}, {""}},
          rows)
          .c_str());
  const fs::path table = fs::path(out).replace_extension(".csv");
  if (!out.parent_path().empty()) fs::create_directories(out.parent_path());
  // A bare file name's folder is the current one ("" would make no absolute path).
  const auto folder = [](const fs::path& p) { return p.has_parent_path() ? p.parent_path() : fs::path("."); };
  write_file_atomic(out, tuned_copy(doc, folder(fs::path(f.config)), folder(out), *best).dump(2) + "\n");
  write_file_atomic(table, table_csv(settings));
  std::printf("%s\n",
              fmt::format("Fastest: inter-op {}, intra-op {} ({:.2f}x); wrote {} (and the table, {})", best->inter,
                          best->intra, settings[0].step_us / best->step_us, out.string(), table.string())
                  .c_str());
  return 0;
}

void define_flags(CLI::App& cmd, TuneFlags& flags) {
  cmd.add_option("config", flags.config, "Train config (JSON)")->required();
  cmd.add_option("--budget", flags.budget, "Seconds to spend measuring, shared by the settings (10)");
  cmd.add_option("--cores", flags.cores, "Cores the settings may use (default: this machine's)")
      ->check(integer_in(1, 4096));
  cmd.add_option("-o,--output", flags.output, "The tuned copy (CONFIG's name with .tuned.json); the table beside it")
      ->check(output_path());
}

}  // namespace

Command add_tune_command(CLI::App& app) {
  return add_command<TuneFlags>(app, "tune",
                                "Measure the training step under the thread counts that fit the machine and write the "
                                "fastest into a copy of the config",
                                define_flags, run_tune);
}

}  // namespace tctl::app
