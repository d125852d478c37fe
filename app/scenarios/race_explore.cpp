#include "app/scenarios/race_explore.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <memory>

#include "core/variable.h"

namespace tctl {

namespace {

// The state one run shares, made fresh by setup(): the variable, and what each thread saw.
struct Shared {
  std::shared_ptr<Variable> v;
  std::vector<int> torn;  // per reader: reads that mixed two writes; each reader writes only its own
  std::vector<std::vector<float>> first_torn;
};

std::string values_text(const std::vector<float>& values) {
  if (values.size() == 1) return fmt::format("{:g}", values[0]);
  return fmt::format("[{:g}]", fmt::join(values, ", "));
}

std::string plural(std::int64_t n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

// counter: every thread adds 1 to every element `updates` times, with assign_add.
ExploreProgram counter(LockingMode mode, const ExploreBounds& b, std::shared_ptr<Shared> s) {
  ExploreProgram p;
  p.threads = b.threads;
  p.setup = [=] { s->v = std::make_shared<Variable>("counter", Tensor::zeros(DType::kF32, Shape{b.elements}), mode); };
  p.body = [=](int) {
    const Tensor one = Tensor::filled(Shape{b.elements}, 1.0f);
    for (int u = 0; u < b.updates; ++u) s->v->assign_add(one);
  };
  p.outcome = [=] {
    const std::vector<float> values = s->v->read().to_floats();
    const std::int64_t each = static_cast<std::int64_t>(b.threads) * b.updates;
    std::int64_t lost = 0;
    for (float x : values) lost += each - static_cast<std::int64_t>(x);
    const std::int64_t all = each * b.elements;
    if (lost == 0) return RunOutcome{fmt::format("counter = {}, every increment kept", values_text(values)), false};
    return RunOutcome{fmt::format("counter = {}, {} of {} increments lost", values_text(values), lost, all), true};
  };
  return p;
}

// sgd: thread t (from 0) takes `updates` steps of plain SGD, w -= lr * g, with its gradient g = t + 1 everywhere
// and lr 1: the arithmetic of the ApplySgd kernel (kernels/cpu/optimizers.cpp), element by element through
// Variable::Update as the kernel does.
ExploreProgram sgd(LockingMode mode, const ExploreBounds& b, std::shared_ptr<Shared> s) {
  ExploreProgram p;
  p.threads = b.threads;
  p.setup = [=] { s->v = std::make_shared<Variable>("w", Tensor::zeros(DType::kF32, Shape{b.elements}), mode); };
  p.body = [=](int t) {
    const float lr = 1.0f, g = static_cast<float>(t + 1);
    for (int u = 0; u < b.updates; ++u) {
      Variable::Update w(*s->v);
      for (std::int64_t i = 0; i < w.size(); ++i) w.apply(i, [&](float x) { return x - lr * g; });
    }
  };
  p.outcome = [=] {
    const std::vector<float> values = s->v->read().to_floats();
    float expected = 0.0f;
    for (int t = 0; t < b.threads; ++t) expected -= static_cast<float>((t + 1) * b.updates);
    const bool kept = std::all_of(values.begin(), values.end(), [&](float x) { return x == expected; });
    if (kept) return RunOutcome{fmt::format("w = {}, every step applied", values_text(values)), false};
    return RunOutcome{fmt::format("w = {}, should be {:g}: steps lost", values_text(values), expected), true};
  };
  return p;
}

// torn-read: the first half of the threads (at least one) assign whole vectors whose elements are all equal
// (writer t's u-th: t * updates + u + 1), the others read the variable `updates` times and count the reads
// whose elements differ.
ExploreProgram torn_read(LockingMode mode, const ExploreBounds& b, std::shared_ptr<Shared> s) {
  const int writers = std::max(1, b.threads / 2);
  ExploreProgram p;
  p.threads = b.threads;
  p.setup = [=] {
    s->v = std::make_shared<Variable>("v", Tensor::zeros(DType::kF32, Shape{b.elements}), mode);
    s->torn.assign(static_cast<std::size_t>(b.threads), 0);
    s->first_torn.assign(static_cast<std::size_t>(b.threads), {});
  };
  p.body = [=](int t) {
    for (int u = 0; u < b.updates; ++u) {
      if (t < writers) {
        s->v->assign(Tensor::filled(Shape{b.elements}, static_cast<float>(t * b.updates + u + 1)));
        continue;
      }
      const std::vector<float> seen = s->v->read().to_floats();
      if (std::any_of(seen.begin(), seen.end(), [&](float x) { return x != seen[0]; })) {
        if (s->torn[static_cast<std::size_t>(t)]++ == 0) s->first_torn[static_cast<std::size_t>(t)] = seen;
      }
    }
  };
  p.outcome = [=] {
    int torn = 0;
    std::string seen;
    for (std::size_t t = 0; t < s->torn.size(); ++t) {
      torn += s->torn[t];
      if (seen.empty() && !s->first_torn[t].empty()) seen = values_text(s->first_torn[t]);
    }
    const std::string final_value = values_text(s->v->read().to_floats());
    if (torn == 0) return RunOutcome{"no torn read, v = " + final_value, false};
    return RunOutcome{fmt::format("{} (first {}), v = {}", plural(torn, "torn read", "torn reads"), seen, final_value),
                      true};
  };
  return p;
}

}  // namespace

const std::vector<std::string>& explore_scenario_names() {
  static const std::vector<std::string> names{"counter", "sgd", "torn-read"};
  return names;
}

bool explorable_mode(LockingMode mode) { return mode != LockingMode::kDataflow; }

bool explore_promised(const std::string& scenario, LockingMode mode) {
  if (scenario == "torn-read") return mode != LockingMode::kNone && mode != LockingMode::kAtomic;
  return mode != LockingMode::kNone;
}

ExploreProgram explore_program(const std::string& scenario, LockingMode mode, const ExploreBounds& bounds) {
  auto s = std::make_shared<Shared>();
  if (scenario == "counter") return counter(mode, bounds, s);
  if (scenario == "sgd") return sgd(mode, bounds, s);
  TCTL_CHECK(scenario == "torn-read", "no explorer program for " + scenario);
  return torn_read(mode, bounds, s);
}

}  // namespace tctl
