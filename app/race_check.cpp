// tensorctl race-check: what happens when threads share variables, under each locking mode, measured.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include <fmt/format.h>

#include "app/commands.h"
#include "app/flag_checks.h"
#include "app/scenarios/race_check.h"
#include "app/terminal.h"
#include "core/device.h"
#include "core/errors.h"
#include "core/text.h"

namespace tctl::app {

namespace {
struct RaceFlags {
  std::string scenario = "all";
  std::string modes = "all";
  std::string graph;
  RaceOptions options;
  bool json = false;
  bool explain = false;
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    std::size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    out.push_back(s.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

std::vector<LockingMode> parse_modes(const std::string& list) {
  std::vector<LockingMode> out;
  if (list == "all") {
    for (auto name : locking_mode_names()) out.push_back(*parse_locking_mode(name));
    return out;
  }
  for (const auto& name : split_list(list)) {
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
  for (const auto& name : split_list(list)) {
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

int run_race_check(const RaceFlags& given) {
  if (!given.graph.empty()) return run_graph_check(given);
  RaceFlags f = given;
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
  cmd.add_option("--threads", f.options.threads, "Threads sharing the state")->check(integer_in(1, 256));
  cmd.add_option("--iterations", f.options.iterations, "Operations per thread (train: steps in all)")
      ->check(positive_integer());
  cmd.add_option("--size", f.options.size, "Elements per variable")->check(integer_in(1, 1 << 24));
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
  cmd.add_flag("--json", f.json, "Print the report as JSON");
  cmd.add_flag("--explain", f.explain, "Print what each mode promises and its TensorFlow counterpart");
  // --graph runs no scenario: a scenario's flag beside it would be ignored, so it is refused.
  for (const char* name :
       {"--scenario", "--modes", "--threads", "--iterations", "--size", "--widen", "--seed", "--device", "--explain"})
    graph->excludes(cmd.get_option(name));
}

}  // namespace

Command add_race_check_command(CLI::App& app) {
  return add_command<RaceFlags>(app, "race-check",
                                "Measure what happens when threads share variables, under each locking mode",
                                define_flags, run_race_check);
}

}  // namespace tctl::app
