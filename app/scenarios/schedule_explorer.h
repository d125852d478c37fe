// ScheduleExplorer: runs a small multi-threaded program under every order of its threads' steps at the schedule
// points of core/schedule_point.h (locks, element loads and stores, compare-and-swaps, versions), one thread at a
// time, and collects every outcome the orders reach. The threads are real and run the real code; the explorer
// only decides, at each point, which of them takes its next step. This is how race-check --explore proves what
// a locking mode can and cannot do, where a timed run only samples it.
//
// Stateless search with sleep sets (Godefroid's partial-order reduction): two steps of different threads on
// different locations, or two loads, commute, so of the orders that differ only by swapping such neighbours one
// is run. Every outcome any order reaches is found, and each explored schedule stands for a different class of
// orders, which is what `schedules` counts. Exact for the program's bounds; past `max_schedules` it stops and
// says so.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/schedule_point.h"

namespace tctl {

// One step taken: which thread (from 0), what it did to what, and what it read or wrote. Copied from the
// AccessPoint when taken: the run's state, which the point's pointers name, is gone after the run.
struct ExploredStep {
  int thread = 0;
  Access access = Access::kLoad;
  std::string name;         // the variable's, or the model location's
  std::int64_t index = -1;  // the element, where the variable has more than one
  bool process_lock = false;
  float value = 0.0f;
  bool took_effect = true;
};

// What a run left behind, in words; `bad` when it breaks what the scenario checks (an update lost, a read torn).
struct RunOutcome {
  std::string text;
  bool bad = false;
};

// The program: `threads` threads each run body(t); setup() makes fresh shared state before each run, and
// outcome() reads it after every thread has finished. Bodies must reach shared state only through code with
// schedule points (Variable), so that a run is decided by its schedule alone.
struct ExploreProgram {
  int threads = 2;
  // What the threads stand for, where they are not all threads ("thread 1", "stream 1"): named in the steps'
  // descriptions. Empty: "thread N".
  std::vector<std::string> actors;
  std::function<void()> setup;
  std::function<void(int)> body;
  std::function<RunOutcome()> outcome;
};

// An outcome with the number of explored schedules that reached it and the shortest of them (fewest steps,
// then fewest switches between threads): its steps and its schedule, the thread of each step (from 0).
struct OutcomeCount {
  RunOutcome outcome;
  std::int64_t schedules = 0;
  std::vector<ExploredStep> steps;
  std::vector<int> schedule;
};

struct Exploration {
  std::int64_t schedules = 0;  // complete runs, one per class of equivalent orders
  std::int64_t pruned = 0;     // runs cut short because every order from there on was already covered
  bool complete = true;        // false when max_schedules stopped the search
  double seconds = 0.0;
  std::vector<OutcomeCount> outcomes;  // in the order first reached
  std::vector<std::string> actors;     // the program's
};

Exploration explore_schedules(const ExploreProgram& program, std::int64_t max_schedules);

// One run of `program` that follows `schedule` (thread numbers from 0) while it lasts, then lets the
// lowest-numbered thread that can step go on; with a seed instead, a pseudo-random thread at every point.
// A schedule that names a thread that cannot take a step there is a SpecError naming its place.
struct ReplayedRun {
  std::vector<ExploredStep> steps;
  std::vector<int> schedule;  // as run, in full
  RunOutcome outcome;
  std::vector<std::string> actors;  // the program's
};
ReplayedRun replay_schedule(const ExploreProgram& program, const std::vector<int>& schedule);
ReplayedRun replay_seeded(const ExploreProgram& program, std::uint64_t seed);

// "thread 1 reads counter = 0", threads numbered from 1 as the output shows them, or named by `actors`.
std::string describe_step(const ExploredStep& step, const std::vector<std::string>& actors = {});
// "1,2,1,2": a schedule as --replay reads it, threads from 1.
std::string schedule_text(const std::vector<int>& schedule);
// Its inverse; a SpecError (flag --replay) on anything but a comma list of thread numbers 1..threads.
std::vector<int> parse_schedule(const std::string& text, int threads);

}  // namespace tctl
