// The explorer's counts for the documented bounds, exact: a change to Variable's points or to the search shows
// here first. The counter under none reaches the lost update; every locked mode reaches only the right value.
#include "app/scenarios/race_explore.h"

#include <doctest/doctest.h>
#include <map>

#include "core/errors.h"

namespace tctl {

namespace {

// outcome text -> schedules reaching it
std::map<std::string, std::int64_t> outcomes(const Exploration& e) {
  std::map<std::string, std::int64_t> out;
  for (const auto& o : e.outcomes) out[o.outcome.text] = o.schedules;
  return out;
}

Exploration explore(const std::string& scenario, LockingMode mode, ExploreBounds b = {}) {
  return explore_schedules(explore_program(scenario, mode, b), 1'000'000);
}

}  // namespace

TEST_CASE("the counter under none: four classes of orders, two lose an increment") {
  const Exploration e = explore("counter", LockingMode::kNone);
  CHECK(e.complete);
  CHECK(e.schedules == 4);
  CHECK(outcomes(e) == std::map<std::string, std::int64_t>{{"counter = 2, every increment kept", 2},
                                                           {"counter = 1, 1 of 2 increments lost", 2}});
  for (const auto& o : e.outcomes) {
    if (!o.outcome.bad) continue;
    std::vector<std::string> lines;
    for (const auto& s : o.steps) lines.push_back(describe_step(s));
    CHECK(lines == std::vector<std::string>{"thread 1 reads counter = 0", "thread 2 reads counter = 0",
                                            "thread 2 writes counter = 1", "thread 1 writes counter = 1"});
    // Of the shortest schedules, the one with the fewest switches between threads.
    CHECK(schedule_text(o.schedule) == "1,2,2,1");
  }
}

TEST_CASE("the counter under each locked mode reaches only the right value") {
  for (LockingMode mode : {LockingMode::kMutex, LockingMode::kProcess, LockingMode::kSnapshot, LockingMode::kAtomic}) {
    CAPTURE(locking_mode_name(mode));
    const Exploration e = explore("counter", mode, {.threads = 2, .updates = 2, .elements = 1});
    CHECK(e.complete);
    CHECK(e.schedules > 1);
    CHECK(outcomes(e) == std::map<std::string, std::int64_t>{{"counter = 4, every increment kept", e.schedules}});
  }
}

}  // namespace tctl

namespace tctl {

TEST_CASE("sgd under none loses either thread's step; under mutex neither") {
  const Exploration none = explore("sgd", LockingMode::kNone);
  CHECK(none.schedules == 4);
  CHECK(outcomes(none) == std::map<std::string, std::int64_t>{{"w = -3, every step applied", 2},
                                                              {"w = -2, should be -3: steps lost", 1},
                                                              {"w = -1, should be -3: steps lost", 1}});
  const Exploration mutex = explore("sgd", LockingMode::kMutex);
  CHECK(outcomes(mutex) == std::map<std::string, std::int64_t>{{"w = -3, every step applied", 2}});
}

TEST_CASE("torn reads: reachable under none and atomic, never under the locking modes") {
  const ExploreBounds b{.threads = 2, .updates = 1, .elements = 2};
  const std::map<std::string, std::int64_t> torn{{"no torn read, v = [1, 1]", 2},
                                                 {"1 torn read (first [1, 0]), v = [1, 1]", 1},
                                                 {"1 torn read (first [0, 1]), v = [1, 1]", 1}};
  CHECK(outcomes(explore("torn-read", LockingMode::kNone, b)) == torn);
  CHECK(outcomes(explore("torn-read", LockingMode::kAtomic, b)) == torn);
  for (LockingMode mode : {LockingMode::kMutex, LockingMode::kProcess, LockingMode::kSnapshot}) {
    CAPTURE(locking_mode_name(mode));
    CHECK(outcomes(explore("torn-read", mode, b)) ==
          std::map<std::string, std::int64_t>{{"no torn read, v = [1, 1]", 2}});
  }
}

TEST_CASE("three threads, two updates each: the counts of a larger bound") {
  const ExploreBounds b{.threads = 3, .updates = 2, .elements = 1};
  const Exploration none = explore("counter", LockingMode::kNone, b);
  CHECK(none.complete);
  CHECK(none.schedules == 7134);
  std::int64_t kept = 0;
  for (const auto& o : none.outcomes)
    if (!o.outcome.bad) kept = o.schedules;
  CHECK(kept == 90);  // the orders that keep every increment are those the lock allows: 6! / (2! 2! 2!)
  CHECK(explore("counter", LockingMode::kMutex, b).schedules == 90);
}

TEST_CASE("a schedule replays to the same steps and outcome") {
  const ExploreProgram program = explore_program("counter", LockingMode::kNone, {});
  const Exploration e = explore_schedules(program, 1000);
  for (const auto& o : e.outcomes) {
    const ReplayedRun run = replay_schedule(program, o.schedule);
    CHECK(run.outcome.text == o.outcome.text);
    CHECK(run.schedule == o.schedule);
    REQUIRE(run.steps.size() == o.steps.size());
    for (std::size_t i = 0; i < run.steps.size(); ++i) CHECK(describe_step(run.steps[i]) == describe_step(o.steps[i]));
  }
  // A short schedule runs on with the lowest-numbered thread.
  CHECK(schedule_text(replay_schedule(program, {1}).schedule) == "2,1,1,2");
  // A seed gives one schedule, the same every time.
  const ReplayedRun seeded = replay_seeded(program, 7);
  CHECK(schedule_text(replay_seeded(program, 7).schedule) == schedule_text(seeded.schedule));
  CHECK(replay_schedule(program, seeded.schedule).outcome.text == seeded.outcome.text);
}

TEST_CASE("a schedule that names a thread that cannot step is refused, naming the step") {
  const ExploreProgram program = explore_program("counter", LockingMode::kMutex, {});
  // Thread 1 holds the lock after its first step: thread 2 cannot take it.
  CHECK_THROWS_WITH_AS(replay_schedule(program, {0, 1}), doctest::Contains("step 2 names thread 2"), SpecError);
  CHECK_THROWS_WITH_AS(parse_schedule("1,x", 2), doctest::Contains("step 2: expected a thread number 1..2"), SpecError);
  CHECK_THROWS_AS(parse_schedule("1,3", 2), SpecError);
  CHECK(parse_schedule("1,2,2", 2) == std::vector<int>{0, 1, 1});
}

}  // namespace tctl

namespace tctl {

TEST_CASE("the GPU model: streams lose an update under none, the locked modes' events keep it, the lock alone not") {
  auto counts = [](const std::string& scenario, LockingMode mode) {
    const Exploration e = explore(scenario, mode);
    CHECK(e.complete);
    CHECK(e.actors == std::vector<std::string>{"thread 1", "thread 2", "stream 1", "stream 2"});
    return outcomes(e);
  };
  using Counts = std::map<std::string, std::int64_t>;
  const Counts lost{{"v = 2, every increment kept", 2}, {"v = 1, 1 of 2 increments lost", 2}};
  CHECK(counts("gpu-counter", LockingMode::kNone) == lost);
  CHECK(counts("gpu-counter", LockingMode::kAtomic) == Counts{{"v = 2, every increment kept", 2}});
  for (LockingMode mode : {LockingMode::kMutex, LockingMode::kProcess, LockingMode::kSnapshot})
    CHECK(counts("gpu-counter", mode) == Counts{{"v = 2, every increment kept", 2}});
  // The host lock orders the queuing, not the kernels: without the event the second kernel may still read
  // before the first one's write.
  CHECK(counts("gpu-without-events", LockingMode::kMutex) ==
        Counts{{"v = 2, every increment kept", 4}, {"v = 1, 1 of 2 increments lost", 4}});
  CHECK_FALSE(explore_promised("gpu-without-events", LockingMode::kMutex));
  // Three threads and three streams, the table in docs/commands/race-check.md.
  const ExploreBounds three{.threads = 3, .updates = 1, .elements = 1};
  auto bad = [](const Exploration& e) {
    std::int64_t n = 0;
    for (const auto& o : e.outcomes) n += o.outcome.bad ? o.schedules : 0;
    return std::pair{e.schedules, n};
  };
  CHECK(bad(explore("gpu-counter", LockingMode::kNone, three)) == std::pair<std::int64_t, std::int64_t>{36, 30});
  CHECK(bad(explore("gpu-counter", LockingMode::kMutex, three)) == std::pair<std::int64_t, std::int64_t>{6, 0});
  CHECK(bad(explore("gpu-without-events", LockingMode::kMutex, three)) ==
        std::pair<std::int64_t, std::int64_t>{216, 180});
  CHECK(explore_promised("gpu-counter", LockingMode::kMutex));
}

TEST_CASE("the GPU model's steps name the streams and the events") {
  const ExploreProgram program = explore_program("gpu-counter", LockingMode::kMutex, {});
  const ReplayedRun run = replay_schedule(program, {1});
  std::vector<std::string> lines;
  for (const auto& s : run.steps) lines.push_back(describe_step(s, run.actors));
  CHECK(lines == std::vector<std::string>{"thread 2 takes the lock of v", "thread 2 queues an update on stream 2",
                                          "thread 2 releases the lock of v", "thread 1 takes the lock of v",
                                          "thread 1 queues an update on stream 1", "thread 1 releases the lock of v",
                                          "stream 1 waits for its next queued update",
                                          "stream 2 waits for its next queued update", "stream 2 reads v = 0",
                                          "stream 2 writes v = 1", "stream 2 records thread 2's event",
                                          "stream 1 waits for thread 2's event", "stream 1 reads v = 1",
                                          "stream 1 writes v = 2", "stream 1 records thread 1's event"});
  CHECK(run.outcome.text == "v = 2, every increment kept");
}

}  // namespace tctl
