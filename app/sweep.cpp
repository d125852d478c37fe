// tensorctl sweep CONFIG: one training run per trial, the trials a grid of values or random ones, run as
// `tensorctl train` processes side by side with the machine's cores divided between them, then ranked by a
// metric of their summaries. A sweep's folder keeps its plan (sweep.json), one run directory and log per trial,
// and the results (results.csv, results.json, best.json); run again, it trains only the trials without a
// summary, so an interrupted sweep resumes.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <thread>

#include <fcntl.h>

#include <fmt/format.h>

#include "app/commands.h"
#include "app/flag_checks.h"
#include "app/terminal.h"
#include "core/errors.h"
#include "core/text.h"
#include "models/data/csv.h"
#include "models/io/atomic_file.h"
#include "models/io/spec_reader.h"
#include "models/nn/sequential.h"
#include "models/record/config_override.h"

extern char** environ;

namespace tctl::app {

namespace {

namespace fs = std::filesystem;

struct SweepFlags {
  std::string config, output, metric = "validation.loss";
  std::vector<std::string> grid, ranges, set;
  std::int64_t random = 0, seed = 0, jobs = 1;
  bool json = false;
};

// One trial: its name (its run directory's) and the values it sets, "KEY=VALUE" each.
struct Trial {
  std::string name;
  std::vector<std::string> set;
};

// "KEY=V1,V2,...": the key and its values, split at the commas outside brackets and quotes ("[4],[8]").
std::pair<std::string, std::vector<std::string>> grid_axis(const std::string& text) {
  const std::size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    throw SpecError("", "--grid", fmt::format("expected KEY=V1,V2,..., got {}", quote_for_message(text)));
  std::vector<std::string> values{""};
  int depth = 0;
  bool quoted = false;
  for (char ch : text.substr(eq + 1)) {
    if (ch == '"') quoted = !quoted;
    if (!quoted && (ch == '[' || ch == '{')) ++depth;
    if (!quoted && (ch == ']' || ch == '}')) --depth;
    if (ch == ',' && depth == 0 && !quoted)
      values.emplace_back();
    else
      values.back() += ch;
  }
  if (std::any_of(values.begin(), values.end(), [](const std::string& v) { return v.empty(); }))
    throw SpecError("", "--grid", fmt::format("an empty value in {}", quote_for_message(text)));
  return {text.substr(0, eq), values};
}

// Every combination of the axes' values, the first axis changing slowest.
std::vector<Trial> grid_trials(const std::vector<std::string>& axes) {
  std::vector<Trial> trials{Trial{}};
  std::set<std::string> keys;
  for (const std::string& text : axes) {
    const auto [key, values] = grid_axis(text);
    // A key on two axes: the later --set wins, so the table would show values the trial never trained with.
    if (!keys.insert(key).second)
      throw SpecError("", "--grid", fmt::format("the key {} is given twice; list its values once", key));
    std::vector<Trial> next;
    for (const Trial& t : trials)
      for (const std::string& v : values) {
        next.push_back(t);
        next.back().set.push_back(key + "=" + v);
      }
    trials = std::move(next);
  }
  return trials;
}

// "KEY=LO:HI" or "KEY=LO:HI:log": values drawn uniformly (or uniformly in their logarithm), whole numbers when
// both ends are written as such.
struct Range {
  std::string key;
  double lo = 0, hi = 0;
  bool log = false, whole = false;
};

Range parse_range(const std::string& text) {
  const std::size_t eq = text.find('=');
  auto fail = [&](const std::string& why) {
    throw SpecError("", "--range", fmt::format("{}: {}", quote_for_message(text), why));
  };
  if (eq == std::string::npos || eq == 0) fail("expected KEY=LO:HI or KEY=LO:HI:log");
  Range r{text.substr(0, eq)};
  std::vector<std::string> parts{""};
  for (char ch : text.substr(eq + 1)) {
    if (ch == ':')
      parts.emplace_back();
    else
      parts.back().push_back(ch);
  }
  if (parts.size() == 3 && parts[2] == "log") r.log = true;
  if (parts.size() < 2 || parts.size() > 3 || (parts.size() == 3 && !r.log))
    fail("expected KEY=LO:HI or KEY=LO:HI:log");
  double ends[2];
  for (int i = 0; i < 2; ++i) {
    std::size_t used = 0;
    try {
      ends[i] = std::stod(parts[static_cast<std::size_t>(i)], &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != parts[static_cast<std::size_t>(i)].size() || !std::isfinite(ends[i]))
      fail(fmt::format("{} is no number", quote_for_message(parts[static_cast<std::size_t>(i)])));
  }
  r.lo = ends[0];
  r.hi = ends[1];
  if (!(r.lo < r.hi)) fail("LO must be below HI");
  if (r.log && r.lo <= 0) fail("a log range needs LO above 0");
  r.whole = parts[0].find_first_of(".eE") == std::string::npos && parts[1].find_first_of(".eE") == std::string::npos;
  return r;
}

// `count` trials of values drawn from the ranges by std::mt19937_64(seed), through our own conversion (the
// standard's distributions differ between libraries).
std::vector<Trial> random_trials(const std::vector<std::string>& texts, std::int64_t count, std::uint64_t seed) {
  std::vector<Range> ranges;
  std::set<std::string> keys;
  for (const std::string& t : texts) {
    ranges.push_back(parse_range(t));
    if (!keys.insert(ranges.back().key).second)
      throw SpecError("", "--range", fmt::format("the key {} is given twice; give it one range", ranges.back().key));
  }
  std::mt19937_64 rng(seed);
  std::vector<Trial> trials(static_cast<std::size_t>(count));
  for (Trial& t : trials)
    for (const Range& r : ranges) {
      const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // [0, 1)
      // Whole numbers: HI included (a uniform draw over HI - LO + 1 values; a log draw rounded).
      const double hi = r.whole && !r.log ? r.hi + 1 : r.hi;
      const double v = r.log ? std::exp(std::log(r.lo) + u * (std::log(hi) - std::log(r.lo))) : r.lo + u * (hi - r.lo);
      t.set.push_back(r.key + "=" +
                      (r.whole ? fmt::format("{}", r.log ? std::llround(v) : std::llround(std::floor(v)))
                               : fmt::format("{:.4g}", v)));
    }
  return trials;
}

// Refuses a --metric that no trial's summary will hold: SPLIT.NAME, the split one the config has (train,
// validation when it keeps a validation split, test when it keeps a test split) and the name its loss or one
// of its metrics.
void check_metric(const SweepFlags& f, const TrainConfig& c) {
  const std::size_t dot = f.metric.find('.');
  const std::string split = f.metric.substr(0, dot), name = dot == std::string::npos ? "" : f.metric.substr(dot + 1);
  std::vector<std::string> names{"loss"};
  names.insert(names.end(), c.metrics.begin(), c.metrics.end());
  const bool split_known = split == "train" || (split == "validation" && c.data.validation_split > 0) ||
                           (split == "test" && c.data.test_split > 0);
  if (!split_known || std::find(names.begin(), names.end(), name) == names.end())
    throw SpecError("", "--metric",
                    fmt::format("{} is none of the trials' figures: train., {}{}then one of {}",
                                quote_for_message(f.metric), c.data.validation_split > 0 ? "validation., " : "",
                                c.data.test_split > 0 ? "test., " : "", join(names)));
}

// The trials the flags ask for, named trial-001, ...; each one's overrides checked as train would check them
// (the config read with them, its model built), so a wrong key is refused before anything runs.
std::vector<Trial> planned_trials(const SweepFlags& f) {
  if (f.grid.empty() == (f.random == 0))
    throw SpecError("", "--grid", "give --grid KEY=V1,V2,... (a grid) or --random N with --range KEY=LO:HI (random)");
  if (f.random > 0 && f.ranges.empty())
    throw SpecError("", "--random", "--random N draws from the --range KEY=LO:HI[:log] given with it; there is none");
  // sweep.json records the flags as given, and JSON holds UTF-8 only.
  for (const auto& [flag, texts] :
       {std::pair{"--grid", &f.grid}, std::pair{"--range", &f.ranges}, std::pair{"--set", &f.set}})
    for (const std::string& text : *texts)
      if (const auto bad = first_non_utf8(text)) throw SpecError("", flag, not_utf8_message("the value", text, *bad));
  std::vector<Trial> trials =
      f.random > 0 ? random_trials(f.ranges, f.random, static_cast<std::uint64_t>(f.seed)) : grid_trials(f.grid);
  for (std::size_t i = 0; i < trials.size(); ++i) {
    trials[i].name = fmt::format("trial-{:03}", i + 1);
    std::vector<ConfigOverride> overrides;
    for (const std::string& s : f.set) overrides.push_back(parse_override(s));
    for (const std::string& s : trials[i].set) overrides.push_back(parse_override(s));
    const TrainConfig c = load_train_config(f.config, overrides);
    (void)Sequential::from_json(c.model_spec, c.model_file, c.model_path, c.seed);
    if (i == 0) check_metric(f, c);
  }
  return trials;
}

// The plan in `dir`/sweep.json: written for a new sweep, compared for one that resumes (another plan in the
// folder is refused: its trials would mix).
void record_plan(const SweepFlags& f, const std::vector<Trial>& trials) {
  nlohmann::json plan{{"config", fs::absolute(f.config).lexically_normal().string()}, {"set", f.set}};
  for (const Trial& t : trials) plan["trials"].push_back({{"name", t.name}, {"set", t.set}});
  const fs::path path = fs::path(f.output) / "sweep.json";
  std::error_code ec;
  if (fs::exists(path, ec)) {
    if (parse_json_file(path.string()) != plan)
      throw SpecError(path.string(), "",
                      "the folder holds another sweep (other config or trials): give another --output, or "
                      "remove it");
    return;
  }
  if (fs::exists(f.output, ec) && !fs::is_empty(f.output, ec))
    throw SpecError(f.output, "", "the folder holds files but no sweep.json: give an empty or new --output");
  fs::create_directories(f.output, ec);
  if (ec) throw RuntimeError(f.output + ": cannot create the sweep's folder: " + ec.message());
  write_file_atomic(path, plan.dump(2) + "\n");
}

// Starts `tensorctl train` for `t`, its output in `dir`/NAME.log; returns its process.
pid_t start_trial(const SweepFlags& f, const Trial& t, int threads) {
  const fs::path dir(f.output);
  std::vector<std::string> args{"tensorctl", "train", f.config};
  for (const std::string& s : f.set) args.insert(args.end(), {"--set", s});
  for (const std::string& s : t.set) args.insert(args.end(), {"--set", s});
  args.insert(args.end(), {"--output", (dir / t.name).string(), "--overwrite", "--quiet", "--inter-op-threads", "1",
                           "--intra-op-threads", std::to_string(threads), "--data-threads", std::to_string(threads)});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  const std::string log = (dir / (t.name + ".log")).string();
  posix_spawn_file_actions_addopen(&files, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&files, 1, 2);
  pid_t pid = -1;
  const int error = posix_spawn(&pid, "/proc/self/exe", &files, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  if (error != 0) throw RuntimeError(fmt::format("cannot start a trial's tensorctl: {}", std::strerror(error)));
  return pid;
}

// Runs the trials without a summary, `jobs` at a time; returns each trial's exit status (0 for one that had
// finished before).
std::vector<int> run_trials(const SweepFlags& f, const std::vector<Trial>& trials, int threads) {
  std::vector<int> status(trials.size(), 0);
  std::map<pid_t, std::size_t> running;
  StatusLine line;
  std::size_t next = 0, done = 0;
  auto finished = [&](std::size_t i) { return fs::exists(fs::path(f.output) / trials[i].name / "summary.json"); };
  while (next < trials.size() || !running.empty()) {
    while (next < trials.size() && static_cast<std::int64_t>(running.size()) < f.jobs) {
      if (finished(next)) {
        ++next;
        ++done;
        continue;
      }
      running[start_trial(f, trials[next], threads)] = next;
      ++next;
    }
    if (running.empty()) break;
    line.show(done, trials.size(), "trials done, " + std::to_string(running.size()) + " running");
    int raw = 0;
    const pid_t pid = ::waitpid(-1, &raw, 0);
    if (pid < 0 && errno == EINTR) continue;
    const auto it = running.find(pid);
    if (it == running.end()) continue;
    status[it->second] = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
    running.erase(it);
    ++done;
  }
  line.clear();
  return status;
}

// The number at `path` ("validation.loss") in a summary, if any.
std::optional<double> metric_of(const nlohmann::json& summary, const std::string& path) {
  const nlohmann::json* at = &summary;
  for (std::size_t i = 0; i <= path.size();) {
    const std::size_t dot = std::min(path.find('.', i), path.size());
    const std::string key = path.substr(i, dot - i);
    if (!at->is_object() || !at->contains(key)) return std::nullopt;
    at = &(*at)[key];
    i = dot + 1;
  }
  return at->is_number() ? std::optional(at->get<double>()) : std::nullopt;
}

// Whether a larger value of the metric is better: accuracies, AUC, precision and recall; lower for the rest
// (losses, errors).
bool higher_is_better(const std::string& metric) {
  for (const char* good : {"accuracy", "auc", "precision", "recall", "samples_per_second"})
    if (metric.find(good) != std::string::npos) return true;
  return false;
}

struct Result {
  std::size_t trial;
  int status;
  std::optional<double> value;
  double seconds = 0;
};

// The value of KEY in a trial's "KEY=VALUE"s, or "".
std::string value_of(const Trial& t, const std::string& key) {
  for (const std::string& s : t.set)
    if (s.starts_with(key + "=")) return s.substr(key.size() + 1);
  return "";
}

// The command that trains a trial's run again on its own.
std::string trial_command(const SweepFlags& f, const Trial& t) {
  std::string out = "tensorctl train " + shell_word(f.config);
  for (const std::string& s : f.set) out += " --set " + shell_word(s);
  for (const std::string& s : t.set) out += " --set " + shell_word(s);
  return out;
}

// The results, best first: the table (or --json), results.csv, results.json and best.json. Returns the exit
// status: 1 when a trial failed.
int report_sweep(const SweepFlags& f, const std::vector<Trial>& trials, const std::vector<Result>& results,
                 bool higher) {
  std::vector<std::string> keys;
  for (const Trial& t : trials)
    for (const std::string& s : t.set)
      if (const std::string k = s.substr(0, s.find('=')); std::find(keys.begin(), keys.end(), k) == keys.end())
        keys.push_back(k);
  std::vector<TableColumn> columns{{"trial"}};
  for (const std::string& k : keys) columns.push_back({k, true});
  for (const char* h : {"", "seconds"}) columns.push_back({*h ? h : f.metric, true});
  columns.push_back({"status"});
  std::vector<std::vector<std::string>> rows;
  std::string csv = "trial";
  for (const std::string& k : keys) csv += "," + csv_field(k);
  csv += "," + csv_field(f.metric) + ",seconds,status\n";
  nlohmann::json j{{"metric", f.metric}, {"higher_is_better", higher}, {"trials", nlohmann::json::array()}};
  int failed = 0;
  for (const Result& r : results) {
    const Trial& t = trials[r.trial];
    const std::string value = r.value ? fmt::format("{:.4f}", *r.value) : "-";
    const std::string status =
        r.status == 0 ? (r.value ? "ok" : "no " + f.metric) : fmt::format("exit {}: {}.log", r.status, t.name);
    failed += r.status != 0;
    std::vector<std::string> row{t.name};
    nlohmann::json set = nlohmann::json::object();
    for (const std::string& k : keys) {
      row.push_back(value_of(t, k));
      set[k] = value_of(t, k);
    }
    for (const std::string& cell : {value, fmt::format("{:.2f}", r.seconds), status}) row.push_back(cell);
    csv += t.name;
    for (std::size_t i = 1; i < row.size(); ++i) csv += "," + csv_field(row[i]);
    csv += "\n";
    j["trials"].push_back({{"name", t.name},
                           {"set", set},
                           {"value", r.value ? nlohmann::json(*r.value) : nlohmann::json()},
                           {"seconds", r.seconds},
                           {"status", r.status}});
    rows.push_back(std::move(row));
  }
  const fs::path dir(f.output);
  write_file_atomic(dir / "results.csv", csv);
  write_file_atomic(dir / "results.json", j.dump(2) + "\n");
  const Result& best = results.front();
  if (best.value) {
    const Trial& t = trials[best.trial];
    const nlohmann::json summary = parse_json_file((dir / t.name / "summary.json").string());
    write_file_atomic(dir / "best.json", nlohmann::json{{"trial", t.name},
                                                        {"metric", f.metric},
                                                        {"value", *best.value},
                                                        {"command", trial_command(f, t)},
                                                        {"config", summary.at("config")}}
                                                 .dump(2) +
                                             "\n");
  }
  if (f.json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("Sweep of %s: %zu trials, by %s (%s is better)\n%s", f.config.c_str(), trials.size(), f.metric.c_str(),
                higher ? "higher" : "lower", table_for_output(columns, rows).c_str());
    if (best.value)
      std::printf("Best: %s, %s %.4f: %s\n", trials[best.trial].name.c_str(), f.metric.c_str(), *best.value,
                  trial_command(f, trials[best.trial]).c_str());
    std::printf("Results in %s (results.csv, results.json, best.json)\n", f.output.c_str());
  }
  if (failed > 0)
    std::fprintf(stderr, "error: %d of %zu trials failed; their logs are beside their runs in %s\n", failed,
                 trials.size(), f.output.c_str());
  return failed > 0 ? 1 : 0;
}

int run_sweep(const SweepFlags& f) {
  if (f.output.empty()) throw SpecError("", "--output", "expected the sweep's folder, got an empty string");
  const auto cores = static_cast<std::int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  if (f.jobs > cores)
    throw SpecError(
        "", "--jobs",
        fmt::format("{} trials at once on {} cores would oversubscribe them: at most {}", f.jobs, cores, cores));
  const std::vector<Trial> trials = planned_trials(f);
  record_plan(f, trials);
  const int threads = static_cast<int>(std::max<std::int64_t>(1, cores / f.jobs));
  const std::vector<int> status = run_trials(f, trials, threads);
  std::vector<Result> results;
  for (std::size_t i = 0; i < trials.size(); ++i) {
    Result r{i, status[i], std::nullopt, 0};
    const fs::path summary = fs::path(f.output) / trials[i].name / "summary.json";
    if (status[i] == 0 && fs::exists(summary)) {
      const nlohmann::json s = parse_json_file(summary.string());
      r.value = metric_of(s, f.metric);
      r.seconds = s.value("wall_seconds", 0.0);
    }
    results.push_back(r);
  }
  const bool higher = higher_is_better(f.metric);
  std::stable_sort(results.begin(), results.end(), [&](const Result& a, const Result& b) {
    if (a.value.has_value() != b.value.has_value()) return a.value.has_value();
    return a.value && (higher ? *a.value > *b.value : *a.value < *b.value);
  });
  return report_sweep(f, trials, results, higher);
}

void define_flags(CLI::App& cmd, SweepFlags& flags) {
  cmd.add_option("config", flags.config, "Train config (JSON)")->required()->check(non_empty("a train config"));
  cmd.add_option("--grid", flags.grid, "KEY=V1,V2,...: a key's values, every combination of the --grid keys a trial")
      ->allow_extra_args(false);
  cmd.add_option("--random", flags.random, "N trials of values drawn from the --range keys")
      ->check(integer_in(1, 10000));
  cmd.add_option("--range", flags.ranges, "KEY=LO:HI or KEY=LO:HI:log: where --random draws a key's values from")
      ->allow_extra_args(false);
  cmd.add_option("--seed", flags.seed, "Seed of the --random draws (0)")->check(non_negative_integer());
  cmd.add_option("--set", flags.set, "KEY=VALUE set in every trial (as train --set)")->allow_extra_args(false);
  cmd.add_option("--jobs", flags.jobs, "Trials trained at once, the cores divided between them (1)")
      ->check(integer_in(1, 1024));
  cmd.add_option("--metric", flags.metric,
                 "What ranks the trials: a number of their summary.json, validation.loss (the default), "
                 "validation.accuracy, test.accuracy, ...");
  cmd.add_option("-o,--output", flags.output, "The sweep's folder: its plan, a run directory per trial, the results")
      ->required();
  cmd.add_flag("--json", flags.json, "Print the results as JSON");
}

}  // namespace

Command add_sweep_command(CLI::App& app) {
  return add_command<SweepFlags>(app, "sweep",
                                 "Train a config once per trial of a grid or of random values, and rank them",
                                 define_flags, run_sweep);
}

}  // namespace tctl::app
