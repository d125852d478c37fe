// race-check: experiments that show, by measurement, what happens when threads share variables under each
// locking mode, plus the queue and per-thread-defaults checks and the static check of a training graph.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/locking_mode.h"
#include "models/record/train_config.h"

namespace tctl {

struct RaceOptions {
  int threads = 4;
  std::int64_t iterations = 1000;  // per thread; for `train`, the total number of steps
  std::int64_t size = 16;          // elements per variable
  int widen = 0;                   // yields inside each read-modify-write, in mode none (the scenario's own delay)
  std::uint64_t seed = 0;
  // Where the shared variables live and their updates run (counter, sgd, train): "cpu", or a device the
  // registry has ("sim:0", "cuda:0"), whose kernels then do every update on the device's stream.
  std::string device = "cpu";
};

// One row of the report: a scenario run under one mode.
struct RaceRow {
  std::string scenario;
  std::string mode;  // a locking mode, or "fifo" / "thread-local" for the mode-free scenarios
  int threads = 0;
  std::int64_t operations = 0;
  double expected = 0.0;
  double observed = 0.0;
  std::int64_t lost_updates = 0;
  std::int64_t torn_reads = 0;
  double ops_per_second = 0.0;
  double final_loss = -1.0;  // `train` only
  bool promised = true;      // the mode promises consistency in this scenario
  bool broken = false;       // it promised and did not keep it
  std::string verdict;
};

// "counter", "sgd", "train", "torn-read", "queue", "defaults".
const std::vector<std::string>& race_scenario_names();
// Whether a scenario's shared state may live on a device other than the CPU (counter, sgd, train); the
// others share host objects (a vector read element by element, a queue, per-thread defaults).
bool race_scenario_runs_on_devices(const std::string& scenario);
// Whether a scenario runs once per locking mode (the others run once).
bool race_scenario_uses_modes(const std::string& scenario);

// Runs one scenario under one mode (ignored by the mode-free scenarios).
RaceRow run_race_scenario(const std::string& scenario, LockingMode mode, const RaceOptions& options);

// The train scenario without shared variables: mirrored replicas (models/train/model.h), each writing only
// its own copy, the gradients all-reduced. Its row's mode is "mirrored".
RaceRow run_mirrored_train(const RaceOptions& options);

// What a mode promises and its TensorFlow counterpart, for --explain.
std::string explain_locking_mode(LockingMode mode);

// The static check: pairs of ops on the same variable, at least one writing, with no path between them.
struct GraphConflictReport {
  int nodes = 0;
  std::vector<std::string> without_auto_deps;  // "read_node <-> write_node on variable"
  std::vector<std::string> with_auto_deps;
};
GraphConflictReport check_training_graph(const TrainConfig& config);

}  // namespace tctl
