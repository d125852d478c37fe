#include "app/scenarios/schedule_explorer.h"

#include <fmt/format.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include "core/errors.h"
#include "core/function_ref.h"
#include "core/text.h"
#include "core/variable.h"

namespace tctl {

namespace {

// Dependence compares the locations of steps pending at one moment of one run, so raw addresses serve: two
// live buffers never share one.
bool writes(Access a) { return a != Access::kLoad && a != Access::kReadVersion && a != Access::kWait; }

// Whether two steps of different threads may not be swapped: they touch one location and one of them writes
// (taking or letting go of a lock counts as writing it).
bool dependent(const AccessPoint& a, const AccessPoint& b) {
  return a.location == b.location && (writes(a.access) || writes(b.access));
}

std::string location_name(const AccessPoint& p) {
  return p.variable != nullptr ? p.variable->name() : p.name != nullptr ? p.name : "?";
}

ExploredStep taken_step(int thread, const AccessPoint& p) {
  const bool one_element = p.variable != nullptr ? p.variable->shape().num_elements() == 1 : p.index < 0;
  return {.thread = thread,
          .access = p.access,
          .name = location_name(p),
          .index = one_element ? -1 : p.index,
          .process_lock = p.variable != nullptr && p.variable->locking_mode() == LockingMode::kProcess};
}

// What the chooser sees at a point: each thread's next step, and which threads can take theirs.
struct Choice {
  const std::vector<AccessPoint>& pending;
  const std::vector<char>& enabled;
};

// Runs the program, once per run() call, under a chooser. Each of the program's threads waits at every schedule
// point until the driver (the calling thread) hands it the turn; exactly one of them runs at any time. The turn
// is one atomic that the waiting threads poll, yielding the core; its release and acquire order each thread's
// memory effects before the next one's, so the state below is touched by one thread at a time. A semaphore per
// thread, which sleeps in the kernel, made a hand-over six times slower (bench/README.md, race-check
// --explore). The threads live as long as the Driver and run the program's body once per run.
class Driver {
 public:
  explicit Driver(const ExploreProgram& program) : p_(program) {
    const auto n = static_cast<std::size_t>(p_.threads);
    pending_.resize(n);
    for (int t = 0; t < p_.threads; ++t) {
      slots_.push_back(std::make_unique<Slot>(this, t));
    }
    for (int t = 0; t < p_.threads; ++t) threads_.emplace_back([this, t] { thread_main(t); });
  }
  // A run the chooser ended by throwing leaves its threads at their points: they run on freely to the end of
  // their bodies (the real locks keep them correct; nothing is recorded), then leave.
  ~Driver() {
    closing_.store(true);
    turn_.store(kEveryone);
    for (auto& t : threads_) t.join();
  }
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  // One run. choose(depth, choice) returns the thread to step, or -1 to take no further choice (the run then
  // ends the way replay_schedule does: the lowest-numbered thread that can step goes on, and it is not counted).
  void run(FunctionRef<int(std::size_t, const Choice&)> choose) {
    const auto n = static_cast<std::size_t>(p_.threads);
    pending_.assign(n, AccessPoint{});
    at_point_.assign(n, 0);
    finished_.assign(n, 0);
    held_.clear();
    steps_.clear();
    counted_ = true;
    p_.setup();
    // Each thread runs alone to its first point, in order, so what they do before it is ordered too.
    for (int t = 0; t < p_.threads; ++t) hand_over(t);
    drive(choose);
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    outcome_ = p_.outcome();
  }

  const std::vector<ExploredStep>& steps() const { return steps_; }
  bool counted() const { return counted_; }
  const RunOutcome& outcome() const { return outcome_; }

 private:
  struct Slot final : StepScheduler {
    Slot(Driver* driver, int thread) : driver(driver), thread(thread) {}
    void before(const AccessPoint& point) override { driver->arrive(thread, point); }
    void after(float value, bool took_effect) override {
      if (driver->closing_.load()) return;
      driver->steps_.back().value = value;
      driver->steps_.back().took_effect = took_effect;
    }
    Driver* driver;
    int thread;
  };

  void thread_main(int t) {
    const auto i = static_cast<std::size_t>(t);
    thread_step_scheduler() = slots_[i].get();
    for (;;) {
      wait_for_turn(t);
      if (closing_.load()) return;
      try {
        p_.body(t);
      } catch (...) {
        if (!closing_.load() && !error_) error_ = std::current_exception();
      }
      if (closing_.load()) return;
      finished_[i] = 1;
      turn_.store(kDriver, std::memory_order_release);
    }
  }

  void arrive(int t, const AccessPoint& point) {
    if (closing_.load()) return;
    const auto i = static_cast<std::size_t>(t);
    pending_[i] = point;
    at_point_[i] = 1;
    turn_.store(kDriver, std::memory_order_release);
    wait_for_turn(t);
    at_point_[i] = 0;
  }

  // Gives thread t the turn and waits until it reaches its next point or ends.
  void hand_over(int t) {
    turn_.store(t, std::memory_order_release);
    wait_for_turn(kDriver);
  }
  void wait_for_turn(int who) {
    for (;;) {
      const int now = turn_.load(std::memory_order_acquire);
      if (now == who || now == kEveryone) return;
      std::this_thread::yield();
    }
  }

  bool can_step(std::size_t t) const {
    if (!at_point_[t]) return false;
    const AccessPoint& p = pending_[t];
    if (p.access == Access::kWait) return p.ready(p.location);
    return p.access != Access::kLock || !held_.contains(p.location);
  }

  void drive(FunctionRef<int(std::size_t, const Choice&)> choose) {
    bool choosing = true;
    for (;;) {
      std::vector<char> enabled(pending_.size());
      bool any = false, all_done = true;
      for (std::size_t t = 0; t < pending_.size(); ++t) {
        enabled[t] = can_step(t);
        any |= enabled[t] != 0;
        all_done &= finished_[t] != 0;
      }
      if (all_done) return;
      // Every thread left waits for a lock another holds. The explorer's scenarios take one lock at a time
      // and always let it go, so this is a defect in Variable, not an outcome: the waiting threads could never
      // be joined.
      TCTL_CHECK(any, "every thread waits for a lock: a deadlock under the explorer");
      int t = choosing ? choose(steps_.size(), Choice{pending_, enabled}) : -1;
      if (t < 0) {
        choosing = false;
        counted_ = false;
        t = static_cast<int>(std::find(enabled.begin(), enabled.end(), 1) - enabled.begin());
      }
      const AccessPoint& p = pending_[static_cast<std::size_t>(t)];
      if (p.access == Access::kLock) held_.insert(p.location);
      if (p.access == Access::kUnlock) held_.erase(p.location);
      steps_.push_back(taken_step(t, p));
      hand_over(t);
    }
  }

  const ExploreProgram& p_;
  std::vector<std::unique_ptr<Slot>> slots_;
  static constexpr int kDriver = -1, kEveryone = -2;
  std::atomic<int> turn_{kDriver};
  std::atomic<bool> closing_{false};
  std::vector<AccessPoint> pending_;
  std::vector<char> at_point_, finished_;
  std::set<const void*> held_;
  std::vector<ExploredStep> steps_;
  std::exception_ptr error_;
  bool counted_ = true;
  RunOutcome outcome_;
  std::vector<std::thread> threads_;  // last: they start once everything above is made
};

std::vector<int> schedule_of(const std::vector<ExploredStep>& steps) {
  std::vector<int> out;
  for (const auto& s : steps) out.push_back(s.thread);
  return out;
}

int switches(const std::vector<int>& schedule) {
  int n = 0;
  for (std::size_t i = 1; i < schedule.size(); ++i) n += schedule[i] != schedule[i - 1];
  return n;
}

void count_outcome(Exploration& e, const Driver& run) {
  const RunOutcome o = run.outcome();
  auto it = std::find_if(e.outcomes.begin(), e.outcomes.end(),
                         [&](const OutcomeCount& c) { return c.outcome.text == o.text; });
  if (it == e.outcomes.end()) it = e.outcomes.insert(e.outcomes.end(), OutcomeCount{.outcome = o});
  ++it->schedules;
  const std::vector<int> schedule = schedule_of(run.steps());
  const bool shorter = it->steps.empty() || schedule.size() < it->schedule.size() ||
                       (schedule.size() == it->schedule.size() && switches(schedule) < switches(it->schedule));
  if (shorter) {
    it->steps = run.steps();
    it->schedule = schedule;
  }
}

// A node of the search: the threads that could step there, the sleep set it was entered with (threads whose
// step there leads only to orders already covered), the threads tried so far, and the one being tried.
struct SearchNode {
  std::vector<AccessPoint> pending;  // its pointers are a past run's: compared with each other, never followed
  std::vector<std::string> names;    // location_name() of each pending step, taken while its run was live
  std::vector<char> enabled;
  std::vector<int> sleep;
  std::vector<int> tried;
  int chosen = -1;
};

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// The first thread of `f` that can step and is neither asleep nor tried, or -1.
int next_untried(const SearchNode& f) {
  for (int t = 0; t < static_cast<int>(f.enabled.size()); ++t)
    if (f.enabled[static_cast<std::size_t>(t)] && !contains(f.sleep, t) && !contains(f.tried, t)) return t;
  return -1;
}

// The sleep set below `f` once it steps `f.chosen`: the threads asleep or tried at f whose steps commute with
// the chosen one (an order that takes them first was, or will be, explored from f).
std::vector<int> sleep_below(const SearchNode& f) {
  std::vector<int> out;
  const AccessPoint& chosen = f.pending[static_cast<std::size_t>(f.chosen)];
  auto keep = [&](int u) {
    if (u != f.chosen && !contains(out, u) && !dependent(f.pending[static_cast<std::size_t>(u)], chosen))
      out.push_back(u);
  };
  for (int u : f.sleep) keep(u);
  for (int u : f.tried) keep(u);
  return out;
}

}  // namespace

Exploration explore_schedules(const ExploreProgram& program, std::int64_t max_schedules) {
  Exploration e;
  e.actors = program.actors;
  const auto start = std::chrono::steady_clock::now();
  std::vector<SearchNode> path;
  Driver run(program);
  for (;;) {
    auto choose = [&](std::size_t depth, const Choice& c) {
      if (depth < path.size()) {
        // The same prefix must bring the same steps: a program that reaches shared state past the schedule
        // points would make the search unsound, and is refused here rather than trusted.
        const SearchNode& f = path[depth];
        const AccessPoint& now = c.pending[static_cast<std::size_t>(f.chosen)];
        const AccessPoint& then = f.pending[static_cast<std::size_t>(f.chosen)];
        // Addresses differ from run to run (each run makes fresh state): the step is compared by what it is.
        TCTL_CHECK(now.access == then.access && now.index == then.index &&
                       location_name(now) == f.names[static_cast<std::size_t>(f.chosen)],
                   "a schedule replayed to a different step: the program is not decided by its schedule");
        return f.chosen;
      }
      SearchNode f{.pending = c.pending, .enabled = c.enabled};
      for (const AccessPoint& p : c.pending) f.names.push_back(p.location != nullptr ? location_name(p) : "");
      if (depth > 0) f.sleep = sleep_below(path[depth - 1]);
      f.chosen = next_untried(f);
      if (f.chosen < 0) return -1;  // every step from here commutes into an order already run
      f.tried.push_back(f.chosen);
      path.push_back(std::move(f));
      return path.back().chosen;
    };
    run.run(choose);
    if (run.counted()) {
      ++e.schedules;
      count_outcome(e, run);
    } else {
      ++e.pruned;
    }
    // Back to the deepest node with a thread left to try.
    while (!path.empty()) {
      SearchNode& f = path.back();
      f.chosen = next_untried(f);
      if (f.chosen >= 0) {
        f.tried.push_back(f.chosen);
        break;
      }
      path.pop_back();
    }
    if (path.empty()) break;
    if (e.schedules >= max_schedules) {
      e.complete = false;
      break;
    }
  }
  e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return e;
}

namespace {

// One run in the order `choose` gives.
ReplayedRun replay_with(const ExploreProgram& program, FunctionRef<int(std::size_t, const Choice&)> choose) {
  Driver run(program);
  run.run(choose);
  return {run.steps(), schedule_of(run.steps()), run.outcome(), program.actors};
}

}  // namespace

ReplayedRun replay_schedule(const ExploreProgram& program, const std::vector<int>& schedule) {
  auto choose = [&](std::size_t depth, const Choice& c) {
    if (depth >= schedule.size()) return -1;
    const int t = schedule[depth];
    if (t < 0 || t >= static_cast<int>(c.enabled.size()) || !c.enabled[static_cast<std::size_t>(t)]) {
      const std::string why =
          t >= static_cast<int>(c.enabled.size()) ? "there is no such thread" : "it cannot take a step there";
      throw SpecError("", "--replay", fmt::format("step {} names thread {}, but {}", depth + 1, t + 1, why));
    }
    return t;
  };
  return replay_with(program, choose);
}

ReplayedRun replay_seeded(const ExploreProgram& program, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto choose = [&](std::size_t, const Choice& c) {
    std::vector<int> can;
    for (std::size_t t = 0; t < c.enabled.size(); ++t)
      if (c.enabled[t]) can.push_back(static_cast<int>(t));
    return can[static_cast<std::size_t>(rng() % can.size())];
  };
  return replay_with(program, choose);
}

std::string describe_step(const ExploredStep& s, const std::vector<std::string>& actors) {
  const std::string& name = s.name;
  const std::string element = s.index < 0 ? name : fmt::format("{}[{}]", name, s.index);
  const auto actor = static_cast<std::size_t>(s.thread);
  const std::string who = actor < actors.size() ? actors[actor] + " " : fmt::format("thread {} ", s.thread + 1);
  const std::string lock = s.process_lock ? "the process lock" : "the lock of " + name;
  switch (s.access) {
    case Access::kLock:
      return who + "takes " + lock;
    case Access::kUnlock:
      return who + "releases " + lock;
    case Access::kLoad:
      return who + fmt::format("reads {} = {:g}", element, s.value);
    case Access::kStore:
      return who + fmt::format("writes {} = {:g}", element, s.value);
    case Access::kCompareAndSwap:
      return who + (s.took_effect ? fmt::format("swaps in {} = {:g}", element, s.value)
                                  : fmt::format("fails to swap {}: it is {:g} now", element, s.value));
    case Access::kReadVersion:
      return who + "takes the current version of " + name;
    case Access::kPublish:
      return who + "publishes its new version of " + name;
    case Access::kAtomicAdd:
      return who + fmt::format("adds atomically to {}: {:g}", element, s.value);
    case Access::kWait:
      return who + "waits for " + name;
    case Access::kSignal:
      return who + name;
  }
  return who;
}

std::string schedule_text(const std::vector<int>& schedule) {
  std::string out;
  for (std::size_t i = 0; i < schedule.size(); ++i) out += (i ? "," : "") + std::to_string(schedule[i] + 1);
  return out;
}

std::vector<int> parse_schedule(const std::string& text, int threads) {
  std::vector<int> out;
  for (const std::string& item : split_at_commas(text)) {
    int t = 0;
    const bool digits = !item.empty() && item.size() <= 3 &&
                        std::all_of(item.begin(), item.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    if (digits) t = std::stoi(item);
    if (!digits || t < 1 || t > threads)
      throw SpecError("", "--replay",
                      fmt::format("step {}: expected a thread number 1..{}, got \"{}\" (a schedule is a comma list "
                                  "such as 1,2,1,2)",
                                  out.size() + 1, threads, item));
    out.push_back(t - 1);
  }
  return out;
}

}  // namespace tctl
