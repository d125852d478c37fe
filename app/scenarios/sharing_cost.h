// race-check --config: what sharing variables costs a real model. The config trains once per locking mode with
// hogwild's workers sharing its one replica, then once with as many mirrored replicas, which share nothing,
// and once alone; each row gives the score, the speed, the updates lost and how stale the gradients were.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/locking_mode.h"
#include "models/record/train_config.h"

namespace tctl {

struct SharingRow {
  std::string strategy;  // "single" (one thread), "hogwild", "mirrored"
  std::string mode;      // the optimizer's locking mode
  int threads = 1;       // workers or replicas
  std::string metric;    // the config's first metric (or "loss"), on its test rows, else validation, else train
  double score = 0.0;
  double loss = 0.0;
  double seconds = 0.0;           // training alone, every epoch
  double steps_per_second = 0.0;  // batches
  double samples_per_second = 0.0;
  double updates_per_second = 0.0;
  std::int64_t expected = 0;  // updates the steps made; hogwild: one per worker per step
  std::int64_t applied = 0;   // counted by the optimizer's step counter, written in its locking mode
  // Updates by how many of the others' each one missed (hogwild's staleness; one entry, 0, elsewhere).
  std::vector<std::int64_t> staleness;
  bool broken = false;  // a mode that promises every update lost some
};

// The rows, in order: single, hogwild under each of `modes`, mirrored. `threads` must divide the config's batch
// (hogwild's and mirrored's shares). progress(i, n, what) is called before each row.
std::vector<SharingRow> measure_sharing(
    const TrainConfig& config, const std::vector<LockingMode>& modes, int threads,
    const std::function<void(std::size_t, std::size_t, const std::string&)>& progress);

}  // namespace tctl
