// race-check --explore: the counter, sgd and torn-read scenarios as small programs whose threads run the real
// Variable code under the schedule explorer (app/scenarios/schedule_explorer.h), one program per locking mode.
#pragma once

#include <string>
#include <vector>

#include "app/scenarios/schedule_explorer.h"
#include "core/locking_mode.h"

namespace tctl {

struct ExploreBounds {
  int threads = 2;
  int updates = 1;   // per thread: increments, sgd steps, or a writer's assigns and a reader's reads
  int elements = 1;  // of the shared variable
};

// "counter", "sgd", "torn-read".
const std::vector<std::string>& explore_scenario_names();
// Whether the explorer can run `mode`: every mode but dataflow, whose order comes from a graph's control
// dependencies, not from Variable's code (under the explorer its updates would be none's).
bool explorable_mode(LockingMode mode);
// What the scenario checks under `mode`: whether a bad outcome breaks a promise the mode makes (a lost update
// under any mode but none, a torn read under any mode but none and atomic).
bool explore_promised(const std::string& scenario, LockingMode mode);

ExploreProgram explore_program(const std::string& scenario, LockingMode mode, const ExploreBounds& bounds);

}  // namespace tctl
