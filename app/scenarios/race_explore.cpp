#include "app/scenarios/race_explore.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <memory>

#include "core/schedule_point.h"
#include "core/variable.h"

namespace tctl {

namespace {

// The state one run shares, made fresh by setup(): the variable, and what each thread saw.
struct ProgramState {
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
ExploreProgram counter_program(LockingMode mode, const ExploreBounds& b, std::shared_ptr<ProgramState> s) {
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
ExploreProgram sgd_program(LockingMode mode, const ExploreBounds& b, std::shared_ptr<ProgramState> s) {
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
ExploreProgram torn_read_program(LockingMode mode, const ExploreBounds& b, std::shared_ptr<ProgramState> s) {
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

// gpu-counter: a model of the counter on a GPU, where each host thread queues its update on a stream of its own
// (Device::own_stream) and the device runs the streams' kernels in any interleaving. A stream runs its queue in
// order; a kernel waits for an event when the host queued a wait for it; the kernel's load and store of each
// element are apart, as a plain CUDA kernel's are. What the modes do (core/variable.cpp, Update::init and
// ~Update): none queues the kernel and nothing else; atomic's kernel adds with atomicAdd; the locked modes take
// the host lock, queue a wait for the event after the last write's kernel, queue the kernel, record its own
// event as the last write's, and let go. With `events` false, the locked modes keep the host lock and skip the
// events: what they would be if the lock alone ordered the device's work.
struct GpuEvent {
  std::string name, action;  // "thread 1's event", "records thread 1's event"
  bool recorded = false;
};
struct QueuedUpdate {
  int wait = -1, record = -1;  // events, or -1
};
struct GpuStream {
  std::vector<QueuedUpdate> queue;
  std::size_t taken = 0;
  std::string queue_name, queue_action;
};
struct GpuModel {
  std::vector<float> v;
  std::vector<GpuEvent> events;
  std::vector<GpuStream> streams;
  int last_write = -1;  // the event after the last write's kernel, under the host lock
  char lock = 0;        // its location
};

bool queued(const void* stream) {
  const auto* s = static_cast<const GpuStream*>(stream);
  return s->queue.size() > s->taken;
}
bool recorded(const void* event) { return static_cast<const GpuEvent*>(event)->recorded; }

void gpu_host_thread(GpuModel& m, LockingMode mode, bool events, int t, int updates) {
  const bool locked = mode != LockingMode::kNone && mode != LockingMode::kAtomic;
  GpuStream& stream = m.streams[static_cast<std::size_t>(t)];
  for (int u = 0; u < updates; ++u) {
    if (locked) schedule_point({.access = Access::kLock, .location = &m.lock, .name = "v"});
    QueuedUpdate q;
    if (locked && events) {
      q.wait = m.last_write;
      q.record = t * updates + u;
    }
    schedule_point({.access = Access::kSignal, .location = &stream, .name = stream.queue_action.c_str()});
    stream.queue.push_back(q);
    if (q.record >= 0) m.last_write = q.record;
    if (locked) schedule_point({.access = Access::kUnlock, .location = &m.lock, .name = "v"});
  }
}

void gpu_stream(GpuModel& m, LockingMode mode, int t, int updates) {
  GpuStream& stream = m.streams[static_cast<std::size_t>(t)];
  for (int u = 0; u < updates; ++u) {
    schedule_point({.access = Access::kWait, .location = &stream, .name = stream.queue_name.c_str(), .ready = queued});
    const QueuedUpdate q = stream.queue[stream.taken++];
    if (q.wait >= 0) {
      GpuEvent& e = m.events[static_cast<std::size_t>(q.wait)];
      schedule_point({.access = Access::kWait, .location = &e, .name = e.name.c_str(), .ready = recorded});
    }
    const std::int64_t many = m.v.size() > 1 ? 0 : -1;
    for (std::size_t i = 0; i < m.v.size(); ++i) {
      const std::int64_t index = many < 0 ? -1 : static_cast<std::int64_t>(i);
      if (mode == LockingMode::kAtomic) {
        schedule_point({.access = Access::kAtomicAdd, .location = &m.v[i], .index = index, .name = "v"});
        schedule_result(m.v[i] += 1.0f);
        continue;
      }
      schedule_point({.access = Access::kLoad, .location = &m.v[i], .index = index, .name = "v"});
      const float old = m.v[i];
      schedule_result(old);
      schedule_point({.access = Access::kStore, .location = &m.v[i], .index = index, .name = "v"});
      m.v[i] = old + 1.0f;
      schedule_result(m.v[i]);
    }
    if (q.record >= 0) {
      GpuEvent& e = m.events[static_cast<std::size_t>(q.record)];
      schedule_point({.access = Access::kSignal, .location = &e, .name = e.action.c_str()});
      e.recorded = true;
    }
  }
}

ExploreProgram gpu_counter(LockingMode mode, const ExploreBounds& b, bool events) {
  auto m = std::make_shared<GpuModel>();
  ExploreProgram p;
  p.threads = 2 * b.threads;  // the host threads, then their streams
  for (int t = 0; t < b.threads; ++t) p.actors.push_back(fmt::format("thread {}", t + 1));
  for (int t = 0; t < b.threads; ++t) p.actors.push_back(fmt::format("stream {}", t + 1));
  p.setup = [=] {
    m->v.assign(static_cast<std::size_t>(b.elements), 0.0f);
    m->events.assign(static_cast<std::size_t>(b.threads * b.updates), {});
    for (int t = 0; t < b.threads; ++t)
      for (int u = 0; u < b.updates; ++u) {
        GpuEvent& e = m->events[static_cast<std::size_t>(t * b.updates + u)];
        e.name = b.updates == 1 ? fmt::format("thread {}'s event", t + 1)
                                : fmt::format("thread {}'s event {}", t + 1, u + 1);
        e.action = "records " + e.name;
      }
    m->streams.assign(static_cast<std::size_t>(b.threads), {});
    for (int t = 0; t < b.threads; ++t) {
      m->streams[static_cast<std::size_t>(t)].queue_name = "its next queued update";
      m->streams[static_cast<std::size_t>(t)].queue_action = fmt::format("queues an update on stream {}", t + 1);
    }
    m->last_write = -1;
  };
  p.body = [=](int a) {
    if (a < b.threads) {
      gpu_host_thread(*m, mode, events, a, b.updates);
    } else {
      gpu_stream(*m, mode, a - b.threads, b.updates);
    }
  };
  p.outcome = [=] {
    const std::int64_t each = static_cast<std::int64_t>(b.threads) * b.updates;
    std::int64_t lost = 0;
    for (float x : m->v) lost += each - static_cast<std::int64_t>(x);
    if (lost == 0) return RunOutcome{fmt::format("v = {}, every increment kept", values_text(m->v)), false};
    return RunOutcome{fmt::format("v = {}, {} of {} increments lost", values_text(m->v), lost, each * b.elements),
                      true};
  };
  return p;
}

}  // namespace

const std::vector<std::string>& explore_scenario_names() {
  static const std::vector<std::string> names{"counter", "sgd", "torn-read", "gpu-counter", "gpu-without-events"};
  return names;
}

bool explorable_mode(LockingMode mode) { return mode != LockingMode::kDataflow; }

bool explore_promised(const std::string& scenario, LockingMode mode) {
  if (scenario == "torn-read") return mode != LockingMode::kNone && mode != LockingMode::kAtomic;
  if (scenario == "gpu-without-events") return false;  // a counterfactual: no mode runs this way
  return mode != LockingMode::kNone;
}

ExploreProgram explore_program(const std::string& scenario, LockingMode mode, const ExploreBounds& bounds) {
  auto s = std::make_shared<ProgramState>();
  if (scenario == "counter") return counter_program(mode, bounds, s);
  if (scenario == "sgd") return sgd_program(mode, bounds, s);
  if (scenario == "gpu-counter") return gpu_counter(mode, bounds, true);
  if (scenario == "gpu-without-events") return gpu_counter(mode, bounds, false);
  TCTL_CHECK(scenario == "torn-read", "no explorer program for " + scenario);
  return torn_read_program(mode, bounds, s);
}

}  // namespace tctl
