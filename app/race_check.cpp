// tensorctl race-check: what happens when threads share variables, under each locking mode, measured.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include <fmt/format.h>

#include "app/commands.h"
#include "app/flag_checks.h"
#include "app/scenarios/race_check.h"
#include "app/scenarios/race_explore.h"
#include "app/scenarios/sharing_cost.h"
#include "app/terminal.h"
#include "core/device.h"
#include "core/errors.h"
#include "core/text.h"
#include "models/record/config_override.h"

namespace tctl::app {

namespace {
struct RaceFlags {
  std::string scenario = "all";
  std::string modes = "all";
  std::string graph;
  RaceOptions options;
  // As given, 0 when not: the timed scenarios and the explorer have their own defaults.
  int threads = 0;
  std::int64_t iterations = 0, size = 0;
  bool json = false;
  bool explain = false;
  bool explore = false;
  std::string replay;
  std::string config;  // --config: what sharing costs a real model
  std::vector<std::string> set;
  std::int64_t max_schedules = 1'000'000;
};

std::vector<LockingMode> parse_modes(const std::string& list) {
  std::vector<LockingMode> out;
  if (list == "all") {
    for (auto name : locking_mode_names()) out.push_back(*parse_locking_mode(name));
    return out;
  }
  for (const auto& name : split_at_commas(list)) {
    auto mode = parse_locking_mode(name);
    if (!mode) {
      std::vector<std::string> known;
      for (auto n : locking_mode_names()) known.emplace_back(n);
      throw SpecError("", "--modes", "unknown locking mode \"" + name + "\" (known: " + join(known) + ")");
    }
    out.push_back(*mode);
  }
  return out;
}

std::vector<std::string> parse_scenarios(const std::string& list) {
  const auto& known = race_scenario_names();
  if (list == "all") return known;
  std::vector<std::string> out;
  for (const auto& name : split_at_commas(list)) {
    if (std::find(known.begin(), known.end(), name) == known.end())
      throw SpecError("", "--scenario", "unknown scenario \"" + name + "\" (known: " + join(known) + ", all)");
    out.push_back(name);
  }
  return out;
}

std::string number(double v) {
  if (std::abs(v - std::round(v)) < 1e-9 && std::abs(v) < 1e15)
    return thousands(static_cast<std::int64_t>(std::llround(v)));
  return fmt::format("{:.2f}", v);
}

int run_graph_check(const RaceFlags& f) {
  TrainConfig c = load_train_config(f.graph);
  GraphConflictReport report = check_training_graph(c);
  if (f.json) {
    nlohmann::json j = {{"config", f.graph},
                        {"nodes", report.nodes},
                        {"without_auto_control_dependencies", report.without_auto_deps},
                        {"with_auto_control_dependencies", report.with_auto_deps}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("Training graph of %s: %d nodes\n", printable_line(f.graph).c_str(), report.nodes);
    std::printf("Unordered conflicts without automatic control dependencies: %zu\n", report.without_auto_deps.size());
    for (const auto& line : report.without_auto_deps) std::printf("  %s\n", line.c_str());
    std::printf("Unordered conflicts with automatic control dependencies: %zu\n", report.with_auto_deps.size());
    for (const auto& line : report.with_auto_deps) std::printf("  %s\n", line.c_str());
  }
  return report.with_auto_deps.empty() ? 0 : 1;
}

// The device of --device (spelled right: its validator), present on this machine, or a SpecError naming the flag. A
// scenario asked for by name that shares host objects (torn-read, queue, defaults) cannot run there; `all` means those
// that can. The device's name is made canonical ("cuda" becomes "cuda:0").
std::vector<std::string> scenarios_on_device(RaceFlags& f, std::vector<std::string> scenarios) {
  std::string& device = f.options.device;
  if (device == "cpu") return scenarios;
  const Device* found = DeviceRegistry::instance().find(device);
  if (found == nullptr)
    throw SpecError("", "--device",
                    "no device " + device + " here (" + DeviceRegistry::instance().why_absent(device) + ")");
  device = found->name();
  if (f.options.widen > 0)
    throw SpecError("", "--widen",
                    "the delay sits inside the CPU's read-modify-write; it has no counterpart on " + device);
  std::vector<std::string> out;
  for (const auto& s : scenarios) {
    if (race_scenario_runs_on_devices(s)) {
      out.push_back(s);
    } else if (f.scenario != "all") {
      throw SpecError("", "--scenario",
                      s + " shares host objects and runs on the cpu only; on " + device + " run counter, sgd or train");
    }
  }
  return out;
}

// Refuses counts a scenario cannot hold, before anything runs. counter and sgd keep their sums in float32,
// exact only to 2^24: past it the updates of a locked mode round away and read as lost, a false "BROKEN". The
// dataflow counter and defaults build a graph node per operation, about 1 KB each, and queue a counter per item.
void check_counts(const RaceFlags& f, const std::vector<std::string>& scenarios,
                  const std::vector<LockingMode>& modes) {
  const double threads = f.options.threads, iterations = static_cast<double>(f.options.iterations);
  auto count_text = [](double n) {
    return n < 1e18 ? thousands(static_cast<std::int64_t>(n)) : fmt::format("about {:.3g}", n);
  };
  // `what` names the count {n} and the limit {limit}.
  auto refuse_past = [&](const std::string& scenario, double count, double limit, const std::string& what) {
    if (count <= limit) return;
    throw SpecError(
        "", "--iterations",
        fmt::format("{}: {} threads x {} iterations ", scenario, f.options.threads, thousands(f.options.iterations)) +
            fmt::format(fmt::runtime(what), fmt::arg("n", count_text(count)), fmt::arg("limit", count_text(limit))) +
            "; lower --threads or --iterations");
  };
  constexpr double kExactFloat = 1 << 24, kMaxNodes = 1 << 20;
  const std::string inexact = ", but a float32 sum counts exactly only to {limit}";
  const std::string too_many_nodes = ", but it builds at most {limit} (about a GB)";
  const bool dataflow = std::find(modes.begin(), modes.end(), LockingMode::kDataflow) != modes.end();
  for (const auto& s : scenarios) {
    if (s == "counter") refuse_past(s, threads * iterations, kExactFloat, "make {n} increments" + inexact);
    if (s == "counter" && dataflow)
      refuse_past(s, threads * iterations, kMaxNodes, "make {n} graph nodes under dataflow" + too_many_nodes);
    // Thread t subtracts t + 1 a step.
    if (s == "sgd")
      refuse_past(s, threads * (threads + 1) / 2 * iterations, kExactFloat, "move the variable by {n}" + inexact);
    if (s == "defaults") refuse_past(s, threads * iterations, kMaxNodes, "make {n} graph nodes" + too_many_nodes);
    // Half the threads produce; each item gets a counter of its arrivals.
    if (s == "queue")
      refuse_past(s, std::max(1.0, std::floor(threads / 2)) * iterations, kExactFloat,
                  "make {n} items, but it tracks at most {limit}");
  }
}

// Every row to run: a scenario under a locking mode, or with none, train's lock-free mirrored row.
using RacePlan = std::vector<std::pair<std::string, std::optional<LockingMode>>>;
RacePlan race_plan(const RaceFlags& f, const std::vector<std::string>& scenarios,
                   const std::vector<LockingMode>& modes) {
  RacePlan plan;
  for (const auto& scenario : scenarios) {
    if (!race_scenario_uses_modes(scenario)) {
      plan.emplace_back(scenario, LockingMode::kMutex);
      continue;
    }
    for (LockingMode m : modes) plan.emplace_back(scenario, m);
    // TensorFlow's lock-free answer beside the locking modes: no variable shared at all (replicas on the
    // CPU; on a device they would share its one stream).
    if (scenario == "train" && f.options.device == "cpu") plan.emplace_back(scenario, std::nullopt);
  }
  return plan;
}

// The rows as --json prints them, with the locking modes explained when asked.
nlohmann::json race_json(const RaceFlags& f, const std::vector<RaceRow>& rows, const std::vector<LockingMode>& modes,
                         bool broken) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json j = {{"scenario", r.scenario},
                        {"mode", r.mode},
                        {"threads", r.threads},
                        {"operations", r.operations},
                        {"expected", r.expected},
                        {"observed", r.observed},
                        {"lost_updates", r.lost_updates},
                        {"torn_reads", r.torn_reads},
                        {"ops_per_second", r.ops_per_second},
                        {"promised", r.promised},
                        {"broken", r.broken},
                        {"verdict", r.verdict}};
    if (r.final_loss >= 0) j["final_loss"] = r.final_loss;
    out.push_back(j);
  }
  nlohmann::json doc = {{"device", f.options.device}, {"rows", out}, {"consistent", !broken}};
  if (f.explain) {
    nlohmann::json ex = nlohmann::json::object();
    for (LockingMode m : modes) ex[std::string(locking_mode_name(m))] = explain_locking_mode(m);
    doc["explain"] = ex;
  }
  return doc;
}

// The rows as a table, preceded by its title, for the terminal.
void print_race_table(const RaceFlags& f, const std::vector<RaceRow>& rows) {
  std::vector<std::vector<std::string>> table;
  bool any_loss = false;
  for (const auto& r : rows) any_loss |= r.final_loss >= 0;
  for (const auto& r : rows) {
    std::vector<std::string> row{r.scenario,
                                 r.mode,
                                 std::to_string(r.threads),
                                 thousands(r.operations),
                                 number(r.expected),
                                 number(r.observed),
                                 thousands(r.lost_updates),
                                 thousands(r.torn_reads),
                                 thousands(static_cast<std::int64_t>(r.ops_per_second))};
    if (any_loss) row.push_back(r.final_loss >= 0 ? fmt::format("{:.4f}", r.final_loss) : "");
    row.push_back(r.verdict);
    table.push_back(row);
  }
  // On a narrow terminal the counts one can work out from the others go first.
  std::vector<TableColumn> columns{
      {"scenario"},          {"mode"},       {"threads", true, 5}, {"operations", true, 6}, {"expected", true, 4},
      {"observed", true, 3}, {"lost", true}, {"torn", true},       {"ops/s", true, 2}};
  if (any_loss) columns.push_back({"final loss", true, 1});
  columns.push_back({"verdict", false, 0, "", 24});
  std::printf("Shared variables and their updates on %s\n", f.options.device.c_str());
  std::printf("%s", table_for_output(columns, table).c_str());
}

// --explore's bounds: the flags as given, or the explorer's small defaults; past 3 threads, 3 updates or 4
// elements the orders run into the millions.
ExploreBounds explore_bounds(const RaceFlags& f, const std::string& scenario) {
  ExploreBounds b;
  b.threads = f.threads > 0 ? f.threads : 2;
  b.updates = f.iterations > 0 ? static_cast<int>(std::min<std::int64_t>(f.iterations, 99)) : 1;
  b.elements = f.size > 0 ? static_cast<int>(std::min<std::int64_t>(f.size, 99)) : (scenario == "torn-read" ? 2 : 1);
  if (b.threads < 2 || b.threads > 3)
    throw SpecError("", "--threads", fmt::format("--explore runs 2 or 3 threads, got {}", b.threads));
  if (b.updates > 3)
    throw SpecError("", "--iterations", fmt::format("--explore runs 1 to 3 updates a thread, got {}", f.iterations));
  if (b.elements > 4) throw SpecError("", "--size", fmt::format("--explore runs 1 to 4 elements, got {}", f.size));
  return b;
}

std::string bounds_text(const ExploreBounds& b) {
  return fmt::format("{} threads x {} x {}", b.threads,
                     b.updates == 1 ? "1 update" : std::to_string(b.updates) + " updates",
                     b.elements == 1 ? "1 element" : std::to_string(b.elements) + " elements");
}

struct ExploredMode {
  std::string scenario;
  LockingMode mode;
  ExploreBounds bounds;
  Exploration result;
  bool broken = false;  // a bad outcome the mode promised to rule out
};

nlohmann::json steps_json(const std::vector<ExploredStep>& steps, const std::vector<std::string>& actors) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& s : steps) out.push_back(describe_step(s, actors));
  return out;
}

// "(in a schedule, 1 is thread 1, 2 thread 2, 3 stream 1, 4 stream 2)", for programs whose threads are not all
// threads; empty for the others.
std::string actors_legend(const std::vector<std::string>& actors) {
  if (actors.empty()) return "";
  std::string out = "(in a schedule, ";
  for (std::size_t i = 0; i < actors.size(); ++i)
    out += fmt::format("{}{} {}{}", i == 0 ? "" : ", ", i + 1, i == 0 ? "is " : "", actors[i]);
  return out + ")";
}

void print_explored(const ExploredMode& m) {
  const Exploration& e = m.result;
  std::printf("%s under %s (%s): %s schedules explored in %.2f s%s\n", m.scenario.c_str(),
              std::string(locking_mode_name(m.mode)).c_str(), bounds_text(m.bounds).c_str(),
              thousands(e.schedules).c_str(), e.seconds,
              e.complete ? "" : fmt::format(", stopped at --max-schedules: not every order").c_str());
  std::size_t width = 0;
  for (const auto& o : e.outcomes) width = std::max(width, o.outcome.text.size());
  for (const auto& o : e.outcomes)
    std::printf("  %-*s %10s%s\n", static_cast<int>(width), o.outcome.text.c_str(), thousands(o.schedules).c_str(),
                o.outcome.bad ? (m.broken ? "  BROKEN" : "  allowed") : "");
  if (const std::string legend = actors_legend(e.actors); !legend.empty()) std::printf("  %s\n", legend.c_str());
  for (const auto& o : e.outcomes) {
    if (!o.outcome.bad) continue;
    std::printf("  shortest schedule to \"%s\" (--replay %s):\n", o.outcome.text.c_str(),
                schedule_text(o.schedule).c_str());
    for (const auto& s : o.steps) std::printf("    %s\n", describe_step(s, e.actors).c_str());
  }
}

nlohmann::json explored_json(const ExploredMode& m) {
  nlohmann::json outcomes = nlohmann::json::array();
  for (const auto& o : m.result.outcomes)
    outcomes.push_back(
        {{"outcome", o.outcome.text},
         {"bad", o.outcome.bad},
         {"schedules", o.schedules},
         {"shortest", {{"schedule", schedule_text(o.schedule)}, {"steps", steps_json(o.steps, m.result.actors)}}}});
  return {{"scenario", m.scenario},        {"mode", locking_mode_name(m.mode)},
          {"threads", m.bounds.threads},   {"updates", m.bounds.updates},
          {"elements", m.bounds.elements}, {"schedules", m.result.schedules},
          {"pruned", m.result.pruned},     {"complete", m.result.complete},
          {"seconds", m.result.seconds},   {"broken", m.broken},
          {"outcomes", outcomes}};
}

// --replay: one scenario under one mode, in the order given.
int run_replay(const RaceFlags& f, const std::string& scenario, LockingMode mode) {
  const ExploreBounds b = explore_bounds(f, scenario);
  const ExploreProgram program = explore_program(scenario, mode, b);
  ReplayedRun run;
  if (f.replay.starts_with("seed:")) {
    const std::string digits = f.replay.substr(5);
    if (digits.empty() || digits.size() > 19 || !std::all_of(digits.begin(), digits.end(), ::isdigit))
      throw SpecError("", "--replay", "expected seed:N with N a non-negative integer, got \"" + f.replay + "\"");
    run = replay_seeded(program, std::stoull(digits));
  } else {
    run = replay_schedule(program, parse_schedule(f.replay, b.threads));
  }
  const bool broken = run.outcome.bad && explore_promised(scenario, mode);
  if (f.json) {
    nlohmann::json j = {{"scenario", scenario},
                        {"mode", locking_mode_name(mode)},
                        {"threads", b.threads},
                        {"updates", b.updates},
                        {"elements", b.elements},
                        {"schedule", schedule_text(run.schedule)},
                        {"steps", steps_json(run.steps, run.actors)},
                        {"outcome", run.outcome.text},
                        {"bad", run.outcome.bad},
                        {"broken", broken}};
    std::printf("%s\n", j.dump(2).c_str());
    return broken ? 1 : 0;
  }
  std::printf("%s under %s (%s), schedule %s:\n", scenario.c_str(), std::string(locking_mode_name(mode)).c_str(),
              bounds_text(b).c_str(), schedule_text(run.schedule).c_str());
  if (const std::string legend = actors_legend(run.actors); !legend.empty()) std::printf("%s\n", legend.c_str());
  for (const auto& s : run.steps) std::printf("  %s\n", describe_step(s, run.actors).c_str());
  std::printf("%s%s\n", run.outcome.text.c_str(), broken ? ": BROKEN, the mode promised otherwise" : "");
  return broken ? 1 : 0;
}

int run_explore(const RaceFlags& f) {
  const auto& known = explore_scenario_names();
  std::vector<std::string> scenarios;
  for (const auto& s : f.scenario == "all" ? known : split_at_commas(f.scenario)) {
    if (std::find(known.begin(), known.end(), s) == known.end())
      throw SpecError("", "--scenario", "--explore runs " + join(known) + "; \"" + s + "\" has no explorer program");
    scenarios.push_back(s);
  }
  std::vector<LockingMode> modes;
  for (LockingMode m : parse_modes(f.modes)) {
    if (explorable_mode(m))
      modes.push_back(m);
    else if (f.modes != "all")
      throw SpecError("", "--modes",
                      "dataflow's order comes from the graph, not from Variable's code: the explorer "
                      "cannot run it");
  }
  if (!f.replay.empty()) {
    if (scenarios.size() != 1 || modes.size() != 1)
      throw SpecError("", "--replay",
                      "a schedule is one scenario's under one mode: give one --scenario and one --modes");
    return run_replay(f, scenarios[0], modes[0]);
  }
  std::vector<ExploredMode> runs;
  for (const auto& scenario : scenarios) {
    const ExploreBounds b = explore_bounds(f, scenario);
    for (LockingMode m : modes) {
      ExploredMode r{scenario, m, b, explore_schedules(explore_program(scenario, m, b), f.max_schedules)};
      for (const auto& o : r.result.outcomes) r.broken |= o.outcome.bad && explore_promised(scenario, m);
      runs.push_back(std::move(r));
    }
  }
  bool broken = false;
  for (const auto& r : runs) broken |= r.broken;
  if (f.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : runs) rows.push_back(explored_json(r));
    std::printf("%s\n", nlohmann::json({{"explored", rows}, {"consistent", !broken}}).dump(2).c_str());
    return broken ? 1 : 0;
  }
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (i > 0) std::printf("\n");
    print_explored(runs[i]);
  }
  if (f.modes == "all")
    std::printf("\n(dataflow is not explored: its order comes from the graph, not from Variable.)\n");
  std::printf("%s\n", broken ? "A mode broke its promise." : "Every mode that promises consistency kept it.");
  return broken ? 1 : 0;
}

// "0: 48%, 1: 52%": the share of the updates that missed each number of the others'.
std::string staleness_text(const std::vector<std::int64_t>& counts) {
  std::int64_t all = 0;
  for (std::int64_t n : counts) all += n;
  std::string out;
  for (std::size_t k = 0; k < counts.size(); ++k) {
    if (counts[k] == 0) continue;
    const double share = 100.0 * static_cast<double>(counts[k]) / static_cast<double>(std::max<std::int64_t>(all, 1));
    out += fmt::format("{}{}: {}", out.empty() ? "" : ", ", k, share < 0.5 ? "<1%" : fmt::format("{:.0f}%", share));
  }
  return out.empty() ? "-" : out;
}

// --config: the config trained alone, by hogwild workers under each mode, and by mirrored replicas.
int run_sharing_costs(const RaceFlags& f) {
  std::vector<ConfigOverride> overrides;
  for (const std::string& s : f.set) overrides.push_back(parse_override(s));
  TrainConfig c = load_train_config(f.config, overrides);
  c.data.stream = DataConfig::Stream::kOff;
  const int threads = f.threads > 0 ? f.threads : 2;
  if (threads < 2 || threads > 64 || c.batch_size % threads != 0)
    throw SpecError("", "--threads",
                    fmt::format("--config shares each batch between the threads: 2 to 64 of them, dividing the "
                                "config's batch_size {}, got {}",
                                c.batch_size, threads));
  std::vector<LockingMode> modes;
  for (LockingMode m : parse_modes(f.modes))
    if (m != LockingMode::kDataflow) modes.push_back(m);
  // dataflow orders one graph's nodes; it is no way for workers to share variables, so it has no hogwild row.
  if (modes.empty())
    throw SpecError("", "--modes",
                    "--config shares the variables between hogwild workers under locking modes, and dataflow is "
                    "none of them: name another (none, mutex, process, atomic, snapshot)");
  StatusLine status;
  const std::vector<SharingRow> rows = measure_sharing(
      c, modes, threads, [&](std::size_t i, std::size_t n, const std::string& what) { status.show(i, n, what); });
  status.clear();
  bool broken = false;
  for (const auto& r : rows) broken |= r.broken;
  if (f.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : rows)
      out.push_back({{"strategy", r.strategy},
                     {"mode", r.mode},
                     {"threads", r.threads},
                     {"metric", r.metric},
                     {"score", r.score},
                     {"loss", r.loss},
                     {"seconds", r.seconds},
                     {"steps_per_second", r.steps_per_second},
                     {"samples_per_second", r.samples_per_second},
                     {"updates_per_second", r.updates_per_second},
                     {"updates_expected", r.expected},
                     {"updates_applied", r.applied},
                     {"lost_updates", r.expected - r.applied},
                     {"staleness", r.staleness},
                     {"broken", r.broken}});
    std::printf("%s\n", nlohmann::json({{"config", f.config}, {"rows", out}, {"consistent", !broken}}).dump(2).c_str());
    return broken ? 1 : 0;
  }
  const std::string metric = rows.front().metric;
  std::vector<std::vector<std::string>> table;
  for (const auto& r : rows)
    table.push_back({r.strategy, r.strategy == "mirrored" ? "own copies" : r.mode, std::to_string(r.threads),
                     fmt::format("{:.4f}", r.score), fmt::format("{:.4f}", r.loss),
                     thousands(std::llround(r.steps_per_second)),
                     thousands(static_cast<std::int64_t>(r.samples_per_second)), thousands(r.expected),
                     thousands(r.expected - r.applied), staleness_text(r.staleness)});
  std::vector<TableColumn> columns{{"strategy"},           {"mode"},
                                   {"threads", true, 3},   {metric, true},
                                   {"loss", true, 2},      {"steps/s", true},
                                   {"samples/s", true, 5}, {"updates", true, 4},
                                   {"lost", true},         {"staleness (updates missed: share)", false, 1, "", 16}};
  std::printf(
      "Training %s, %lld epochs, batch %lld: alone, shared by %d hogwild workers, and by %d mirrored "
      "replicas\n",
      printable_line(f.config).c_str(), static_cast<long long>(c.epochs), static_cast<long long>(c.batch_size), threads,
      threads);
  std::printf("%s", table_for_output(columns, table).c_str());
  std::printf("%s\n", broken ? "A mode that promises every update lost some."
                             : "Every mode that promises every update kept them.");
  return broken ? 1 : 0;
}

int run_race_check(const RaceFlags& given) {
  if (!given.graph.empty()) return run_graph_check(given);
  if (!given.config.empty()) return run_sharing_costs(given);
  if (given.explore || !given.replay.empty()) return run_explore(given);
  RaceFlags f = given;
  if (f.threads > 0) f.options.threads = f.threads;
  if (f.iterations > 0) f.options.iterations = f.iterations;
  if (f.size > 0) f.options.size = f.size;
  const auto scenarios = scenarios_on_device(f, parse_scenarios(f.scenario));
  const auto modes = parse_modes(f.modes);
  check_counts(f, scenarios, modes);
  if (f.explain && !f.json) {
    for (LockingMode m : modes)
      std::printf("%-9s %s\n", std::string(locking_mode_name(m)).c_str(), explain_locking_mode(m).c_str());
    std::printf("\n");
  }
  const RacePlan plan = race_plan(f, scenarios, modes);
  std::vector<RaceRow> rows;
  StatusLine status;
  for (const auto& [scenario, mode] : plan) {
    status.show(rows.size() + 1, plan.size(),
                "race-check " + scenario + ", mode " + (mode ? std::string(locking_mode_name(*mode)) : "mirrored"));
    rows.push_back(mode ? run_race_scenario(scenario, *mode, f.options) : run_mirrored_train(f.options));
  }
  status.clear();
  bool broken = false;
  for (const auto& r : rows) broken |= r.broken;

  if (f.json) {
    std::printf("%s\n", race_json(f, rows, modes, broken).dump(2).c_str());
    return broken ? 1 : 0;
  }
  print_race_table(f, rows);
  std::printf("%s\n", broken ? "A mode broke its promise." : "Every mode that promises consistency kept it.");
  return broken ? 1 : 0;
}

void define_flags(CLI::App& cmd, RaceFlags& f) {
  cmd.add_option("--scenario", f.scenario,
                 "counter, sgd, train, torn-read, queue, defaults, or all (a comma list works)");
  cmd.add_option("--modes", f.modes, "Locking modes to run: none, mutex, process, atomic, snapshot, dataflow, or all");
  cmd.add_option("--threads", f.threads, "Threads sharing the state (default 4; --explore: 2, at most 3)")
      ->check(integer_in(1, 256));
  cmd.add_option("--iterations", f.iterations,
                 "Operations per thread, default 1000 (train: steps in all; --explore: updates, default 1, at most 3)")
      ->check(positive_integer());
  cmd.add_option("--size", f.size, "Elements per variable (default 16; --explore: 1, torn-read 2, at most 4)")
      ->check(integer_in(1, 1 << 24));
  cmd.add_option("--widen", f.options.widen,
                 "Yields inside each read-modify-write in mode none, so lost updates show on few cores")
      ->check(integer_in(0, 1000000));
  cmd.add_option("--seed", f.options.seed, "Seed of the train scenario")->check(non_negative_integer());
  cmd.add_option("--device", f.options.device,
                 "Where the shared variables live and their updates run (counter, sgd, train): cpu, cuda:N, sim:N")
      ->check(device_name());
  CLI::Option* graph =
      cmd.add_option("--graph", f.graph, "Instead: list unordered variable conflicts in CONFIG's training graph")
          ->check(non_empty("a train config"));
  cmd.add_flag("--explore", f.explore,
               "Instead of timing threads, run counter, sgd, torn-read and the GPU models gpu-counter and "
               "gpu-without-events under every order of their steps");
  cmd.add_option("--replay", f.replay,
                 "Run one --scenario under one mode in the order a schedule gives (1,2,1,2: a thread per step), "
                 "or seed:N for a random one")
      ->check(non_empty("a schedule"));
  cmd.add_option("--max-schedules", f.max_schedules, "--explore stops after this many schedules (default 1000000)")
      ->check(positive_integer());
  CLI::Option* config =
      cmd.add_option(
             "--config", f.config,
             "Instead: train CONFIG alone, by --threads hogwild workers under each mode, and by mirrored replicas")
          ->check(non_empty("a train config"));
  cmd.add_option("--set", f.set, "With --config: KEY=VALUE overrides a config key (repeatable), as train's")
      ->allow_extra_args(false)
      ->needs(config);
  cmd.add_flag("--json", f.json, "Print the report as JSON");
  cmd.add_flag("--explain", f.explain, "Print what each mode promises and its TensorFlow counterpart");
  // --graph runs no scenario: a scenario's flag beside it would be ignored, so it is refused.
  for (const char* name : {"--scenario", "--modes", "--threads", "--iterations", "--size", "--widen", "--seed",
                           "--device", "--explain", "--explore", "--replay", "--max-schedules"})
    graph->excludes(cmd.get_option(name));
  for (const char* name : {"--scenario", "--iterations", "--size", "--widen", "--seed", "--device", "--explain",
                           "--explore", "--replay", "--max-schedules", "--graph"})
    config->excludes(cmd.get_option(name));
  // The explorer runs no timed threads, on the CPU only.
  for (const char* explorer : {"--explore", "--replay"})
    for (const char* name : {"--widen", "--seed", "--device"}) cmd.get_option(explorer)->excludes(cmd.get_option(name));
}

}  // namespace

Command add_race_check_command(CLI::App& app) {
  return add_command<RaceFlags>(app, "race-check",
                                "Measure what happens when threads share variables, under each locking mode",
                                define_flags, run_race_check);
}

}  // namespace tctl::app
