#include "app/scenarios/race_check.h"

#include <fmt/format.h>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <latch>
#include <mutex>
#include <thread>

#include "core/autodiff.h"
#include "core/errors.h"
#include "core/fifo_queue.h"
#include "core/kernel_context.h"
#include "core/session.h"
#include "models/data/dataset.h"
#include "models/train/model.h"
#include "models/train/model_builder.h"
#include "models/train/trainer.h"

namespace tctl {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Runs fn(0) .. fn(n - 1) on n threads; the first exception one of them threw is rethrown here.
template <class Fn>
void run_threads(int n, Fn fn) {
  std::vector<std::thread> threads;
  std::mutex mu;
  std::exception_ptr first;
  for (int t = 0; t < n; ++t)
    threads.emplace_back([&, t] {
      try {
        fn(t);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

RaceRow make_row(const std::string& scenario, const std::string& mode, const RaceOptions& o) {
  RaceRow r;
  r.scenario = scenario;
  r.mode = mode;
  r.threads = o.threads;
  return r;
}

// Fills in the verdict from lost updates and torn reads.
void judge(RaceRow& r, bool promises_no_loss, bool promises_no_tearing) {
  r.promised = promises_no_loss && promises_no_tearing;
  const bool lost = r.lost_updates != 0;
  const bool torn = r.torn_reads != 0;
  r.broken = (promises_no_loss && lost) || (promises_no_tearing && torn);
  if (r.broken) {
    r.verdict = "BROKEN: promised consistency";
  } else if (lost || torn) {
    r.verdict = lost ? "lost updates (allowed)" : "torn reads (allowed)";
  } else {
    r.verdict = r.promised ? "consistent" : "no race seen this run";
  }
}

// Records the counts of a scenario whose operations should each leave one update behind.
void record_updates(RaceRow& r, std::int64_t operations, double expected, double observed, double elapsed) {
  r.operations = operations;
  r.expected = expected;
  r.observed = observed;
  r.lost_updates = std::llround(expected - observed);
  r.ops_per_second = static_cast<double>(operations) / std::max(elapsed, 1e-9);
}

// --widen, the scenarios' own delay: `widen` yields between each element's read and its write, inside the
// variable's read-modify-write (Variable::Update::apply calls the function between the two), so the updates
// mode none loses show even on two cores. Other modes get no delay: they hold a lock or retry anyway.
void add_widened(Variable& v, const float* delta, float scale, int widen) {
  Variable::Update u(v);
  if (v.locking_mode() != LockingMode::kNone) widen = 0;
  for (std::int64_t i = 0; i < u.size(); ++i)
    u.apply(i, [&](float old) {
      for (int k = 0; k < widen; ++k) std::this_thread::yield();
      return old + scale * delta[i];
    });
}

// ApplySgd with the delay, for the sgd scenario under --widen: w += -lr * g, the same arithmetic.
void widened_sgd_kernel(KernelContext& ctx) {
  const float lr = ctx.input(1).data<float>()[0];
  add_widened(ctx.var(0), ctx.input(0).data<float>(), -lr, static_cast<int>(ctx.attrs().i("widen")));
}
TCTL_REGISTER_OP({.name = "RaceCheckWidenedSgd", .num_inputs = 2, .infer = [](const InferContext&) {
                    return TensorSpec{DType::kF32, Shape{}};
                  }});
TCTL_REGISTER_KERNEL("RaceCheckWidenedSgd", "cpu", widened_sgd_kernel);

// The counter's sessions place its one op where the scope asks, or refuse: an Increment that fell back to
// the CPU would measure the CPU, not the device asked for. The sgd scenario's gradient ops may fall back
// (the simulated device has few kernels); its update, whose race is measured, has a kernel everywhere.
SessionOptions on_device(bool strict = true) {
  SessionOptions so;
  so.placement.strict = strict;
  return so;
}

// A thread's arrival at a latch that every scenario thread must reach before the clock starts; a thread
// that leaves early (it threw) still counts, so the others do not wait for it forever.
class Arrival {
 public:
  explicit Arrival(std::latch& latch) : latch_(latch) {}
  ~Arrival() {
    if (!arrived_) latch_.count_down();
  }
  Arrival(const Arrival&) = delete;
  Arrival& operator=(const Arrival&) = delete;
  void wait() {
    arrived_ = true;
    latch_.arrive_and_wait();
  }

 private:
  std::latch& latch_;
  bool arrived_ = false;
};

// On a device, a scenario thread queues its work on a stream of its own where the device has such streams
// (a GPU), so threads' updates may overlap there as they do on the CPU; null on the CPU and on sim.
std::unique_ptr<OwnStream> own_stream(const RaceOptions& o) {
  if (o.device == "cpu") return nullptr;
  Device* device = DeviceRegistry::instance().find(o.device);
  return device != nullptr ? device->own_stream() : nullptr;
}

bool keeps_updates(LockingMode m) { return m != LockingMode::kNone; }
bool never_tears(LockingMode m) { return m != LockingMode::kNone && m != LockingMode::kAtomic; }

// counter: every thread adds 1 to every element `iterations` times.
RaceRow counter(LockingMode mode, const RaceOptions& o) {
  RaceRow r = make_row("counter", std::string(locking_mode_name(mode)), o);
  auto v = std::make_shared<Variable>("counter", Tensor::zeros(DType::kF32, Shape{o.size}), mode);
  const std::int64_t total = o.threads * o.iterations;
  auto start = Clock::now();
  if (mode == LockingMode::kDataflow) {
    // One graph holds every increment; automatic control dependencies chain them, and an executor with
    // `threads` inter-op threads runs it, so the graph, not a lock, orders the updates.
    auto g = std::make_shared<Graph>();
    std::vector<Output> updates;
    {
      Graph::Scope on(*g, "counter", o.device, Phase::kUpdate);
      for (std::int64_t i = 0; i < total; ++i)
        updates.push_back(g->add("Increment", {}, Attrs{{"amount", 1.0}}, {{v, true}}));
    }
    add_auto_control_dependencies(*g);
    ThreadPool inter(o.threads), intra(1);
    Session s(g, inter, intra, on_device());
    start = Clock::now();
    s.run({}, {}, updates);
  } else if (o.device != "cpu") {
    // The device's Increment kernel, one node that every thread's runs of one session share.
    auto g = std::make_shared<Graph>();
    Output increment;
    {
      Graph::Scope on(*g, "counter", o.device, Phase::kUpdate);
      increment = g->add("Increment", {}, Attrs{{"amount", 1.0}}, {{v, true}});
    }
    ThreadPool inter(1), intra(1);
    Session s(g, inter, intra, on_device());
    s.run({}, {}, std::span(&increment, 1));  // places the variable before the clock starts
    std::latch ready(o.threads);
    run_threads(o.threads, [&](int t) {
      Arrival arrival(ready);
      const auto own = own_stream(o);
      // The clock starts once every thread has its stream (making one drains the device's).
      arrival.wait();
      if (t == 0) start = Clock::now();
      for (std::int64_t i = t == 0 ? 1 : 0; i < o.iterations; ++i) s.run({}, {}, std::span(&increment, 1));
    });
  } else {
    const Tensor one = Tensor::filled(Shape{o.size}, 1.0f);
    run_threads(o.threads, [&](int) {
      for (std::int64_t i = 0; i < o.iterations; ++i) add_widened(*v, one.data<float>(), 1.0f, o.widen);
    });
  }
  const double elapsed = seconds_since(start);
  double sum = 0.0;
  for (float x : v->read().to(cpu_device()).to_floats()) sum += x;
  record_updates(r, total, static_cast<double>(total), sum / static_cast<double>(o.size), elapsed);
  judge(r, keeps_updates(mode), true);
  return r;
}

// sgd: thread t (1-based) minimises sum(v * t): its gradient is t everywhere, and it subtracts it.
RaceRow sgd(LockingMode mode, const RaceOptions& o) {
  RaceRow r = make_row("sgd", std::string(locking_mode_name(mode)), o);
  auto v = std::make_shared<Variable>("v", Tensor::zeros(DType::kF32, Shape{o.size}), mode);
  const bool widened = o.widen > 0 && mode == LockingMode::kNone;
  // Adds thread t's gradient step to g, built the way a user would: trace the loss, differentiate, update.
  auto add_step = [&](Graph& g, int t) {
    Graph::Scope on(g, "sgd", o.device, Phase::kUpdate);
    Output w = g.read(v);
    Output loss =
        g.add("Sum", {g.add("Mul", {w, g.constant(Tensor::filled(Shape{o.size}, static_cast<float>(t + 1)))})});
    std::vector<Output> wrt{w};
    Output grad = gradients(g, loss, wrt)[0];
    if (widened)
      return g.add("RaceCheckWidenedSgd", {grad, g.scalar(1.0f)}, Attrs{{"widen", std::int64_t{o.widen}}}, {{v, true}});
    return g.add("ApplySgd", {grad, g.scalar(1.0f)}, {}, {{v, true}});
  };
  // On a device the variable moves there before any thread starts, on the device's stream, which a
  // thread's own stream waits for when it is made.
  if (o.device != "cpu") v->place_on(DeviceRegistry::instance().find(o.device));
  double expected_per_round = 0.0;
  for (int t = 0; t < o.threads; ++t) expected_per_round += t + 1;
  auto start = Clock::now();
  if (mode == LockingMode::kDataflow) {
    auto g = std::make_shared<Graph>();
    std::vector<Output> steps;
    for (int t = 0; t < o.threads; ++t) steps.push_back(add_step(*g, t));
    add_auto_control_dependencies(*g);
    ThreadPool inter(o.threads), intra(1);
    Session s(g, inter, intra, on_device(false));
    start = Clock::now();
    for (std::int64_t i = 0; i < o.iterations; ++i) s.run({}, {}, steps);
  } else {
    std::latch ready(o.threads);
    run_threads(o.threads, [&](int t) {
      Arrival arrival(ready);
      const auto own = own_stream(o);
      // Each thread traces into its own default graph, as a thread of a TensorFlow program would.
      auto g = std::make_shared<Graph>();
      auto scope = g->as_default();
      std::vector<Output> step{add_step(default_graph(), t)};
      ThreadPool inter(1), intra(1);
      Session s(g, inter, intra, on_device(false));
      // The clock starts once every thread has its graph, session and stream.
      arrival.wait();
      if (t == 0) start = Clock::now();
      for (std::int64_t i = 0; i < o.iterations; ++i) s.run({}, {}, step);
    });
  }
  const double elapsed = seconds_since(start);
  double sum = 0.0;
  for (float x : v->read().to(cpu_device()).to_floats()) sum += x;
  r.operations = o.threads * o.iterations;
  r.expected = -expected_per_round * static_cast<double>(o.iterations);
  r.observed = sum / static_cast<double>(o.size);
  // A lost update is one thread's step of (on average) expected_per_round / threads.
  r.lost_updates = std::llround((r.observed - r.expected) / (expected_per_round / o.threads));
  r.ops_per_second = static_cast<double>(r.operations) / std::max(elapsed, 1e-9);
  judge(r, keeps_updates(mode), true);
  return r;
}

// The digits MLP of the train scenarios, and the standardized digits cut into batches of `batch` rows.
const nlohmann::json& race_train_spec() {
  static const nlohmann::json spec = {{"name", "digits_mlp"},
                                      {"input_shape", {64}},
                                      {"layers",
                                       {{{"type", "Dense"}, {"units", 128}, {"activation", "relu"}},
                                        {{"type", "Dense"}, {"units", 64}, {"activation", "relu"}},
                                        {{"type", "Dense"}, {"units", 10}, {"activation", "softmax"}}}}};
  return spec;
}

struct RaceBatches {
  Dataset digits;
  std::vector<Tensor> xs, ys;
};
RaceBatches race_batches(std::uint64_t seed, std::int64_t batch) {
  RaceBatches out;
  out.digits = load_builtin("digits", seed, "race-check", "");
  Standardizer st;
  st.fit(out.digits.x);
  out.digits.x = st.apply(out.digits.x);
  for (std::int64_t b = 0; b < out.digits.size() / batch; ++b) {
    std::vector<std::int64_t> rows;
    for (std::int64_t i = b * batch; i < (b + 1) * batch; ++i) rows.push_back(i);
    Dataset d = take_rows(out.digits, rows);
    out.xs.push_back(d.x);
    out.ys.push_back(d.y);
  }
  return out;
}

// train: `threads` threads share one digits MLP and its session, each running its own batches, for
// `iterations` steps in all. The optimizer's step counter, in the same mode, counts the updates that stuck.
RaceRow train(LockingMode mode, const RaceOptions& o) {
  RaceRow r = make_row("train", std::string(locking_mode_name(mode)), o);
  ModelOptions mo;
  mo.optimizer.locking = mode;
  mo.seed = o.seed;
  // Dataflow has no lock, so concurrency must come from the graph: one caller, an inter-op pool of
  // `threads`. The other modes get `threads` callers, each running its step inline.
  mo.inter_op_threads = mode == LockingMode::kDataflow ? o.threads : 1;
  mo.intra_op_threads = 1;
  mo.device = o.device;
  auto net = std::make_shared<Sequential>(Sequential::from_json(race_train_spec(), "race-check", "", o.seed, mode));
  Model model(net, mo);
  const RaceBatches data = race_batches(o.seed, 32);
  const auto batches = static_cast<std::int64_t>(data.xs.size());
  const int callers = mode == LockingMode::kDataflow ? 1 : o.threads;
  const std::int64_t total = o.iterations;
  auto start = Clock::now();
  run_threads(callers, [&](int t) {
    for (std::int64_t i = t; i < total; i += callers) {
      const auto k = static_cast<std::size_t>(i % batches);
      model.train_step(data.xs[k], data.ys[k], i);
    }
  });
  const double elapsed = seconds_since(start);
  const auto state = model.optimizer().state();
  record_updates(r, total, static_cast<double>(total), state.back()->read().to(cpu_device()).item(), elapsed);
  r.final_loss = metric(Trainer(model).evaluate(data.digits, 256), "loss");
  judge(r, keeps_updates(mode), true);
  return r;
}

// torn-read: writers store whole vectors whose elements are all equal; readers count vectors that are not.
RaceRow torn_read(LockingMode mode, const RaceOptions& o) {
  RaceRow r = make_row("torn-read", std::string(locking_mode_name(mode)), o);
  auto v = std::make_shared<Variable>("v", Tensor::zeros(DType::kF32, Shape{o.size}), mode);
  auto uniform = [](const Tensor& t) {
    const float* p = t.data<float>();
    for (std::int64_t i = 1; i < t.num_elements(); ++i)
      if (p[i] != p[0]) return false;
    return true;
  };
  std::atomic<std::int64_t> reads{0}, torn{0};
  auto start = Clock::now();
  if (mode == LockingMode::kDataflow) {
    // Writes and reads in one graph: control dependencies put each read after the write before it.
    auto g = std::make_shared<Graph>();
    std::vector<Output> fetches, targets;
    for (int t = 0; t < o.threads; ++t) {
      targets.push_back(g->add(
          "AssignVariable", {g->constant(Tensor::filled(Shape{o.size}, static_cast<float>(t + 1)))}, {}, {{v, true}}));
      fetches.push_back(g->read(v));
    }
    add_auto_control_dependencies(*g);
    ThreadPool inter(o.threads), intra(1);
    Session s(g, inter, intra);
    start = Clock::now();
    for (std::int64_t i = 0; i < o.iterations; ++i)
      for (const Tensor& t : s.run({}, fetches, targets)) {
        reads.fetch_add(1);
        if (!uniform(t)) torn.fetch_add(1);
      }
  } else {
    const int writers = std::max(1, o.threads / 2);
    const int readers = std::max(1, o.threads - writers);
    std::atomic<int> writing{writers};
    std::atomic<int> started{0};
    run_threads(writers + readers, [&](int t) {
      // Nobody starts before everybody is there, so readers and writers really overlap.
      started.fetch_add(1);
      while (started.load() < writers + readers) std::this_thread::yield();
      if (t < writers) {
        for (std::int64_t i = 0; i < o.iterations; ++i)
          v->assign(Tensor::filled(Shape{o.size}, static_cast<float>(t * o.iterations + i + 1)));
        writing.fetch_sub(1);
        return;
      }
      while (writing.load() > 0) {
        reads.fetch_add(1);
        if (!uniform(v->read())) torn.fetch_add(1);
      }
    });
  }
  const double elapsed = seconds_since(start);
  r.operations = reads.load();
  r.expected = static_cast<double>(reads.load());
  r.observed = static_cast<double>(reads.load() - torn.load());
  r.torn_reads = torn.load();
  r.ops_per_second = static_cast<double>(r.operations) / std::max(elapsed, 1e-9);
  judge(r, true, never_tears(mode));
  return r;
}

// queue: producers enqueue numbered items, consumers dequeue them; each must arrive exactly once. Then
// consumers blocked on the empty queue must all be released by close().
RaceRow queue(const RaceOptions& o) {
  RaceRow r = make_row("queue", "fifo", o);
  const int producers = std::max(1, o.threads / 2);
  const int consumers = std::max(1, o.threads - producers);
  const std::int64_t items = producers * o.iterations;
  FIFOQueue<std::int64_t> q(8);
  std::vector<std::atomic<int>> seen(static_cast<std::size_t>(items));
  std::atomic<int> done_producers{0};
  auto start = Clock::now();
  run_threads(producers + consumers, [&](int t) {
    if (t < producers) {
      for (std::int64_t i = 0; i < o.iterations; ++i) q.enqueue(t * o.iterations + i);
      if (done_producers.fetch_add(1) + 1 == producers) q.close();
      return;
    }
    std::int64_t item;
    while (q.dequeue(item) == QueueStatus::kOk) seen[static_cast<std::size_t>(item)].fetch_add(1);
  });
  const double elapsed = seconds_since(start);
  std::int64_t once = 0, twice = 0;
  for (auto& s : seen) {
    once += s.load() == 1;
    twice += s.load() > 1;
  }
  // close() must release consumers that are already blocked.
  FIFOQueue<int> empty(1);
  std::atomic<int> released{0};
  std::thread closer([&] {
    while (empty.waiting_consumers() < static_cast<std::size_t>(consumers)) std::this_thread::yield();
    empty.close();
  });
  run_threads(consumers, [&](int) {
    int v;
    if (empty.dequeue(v) == QueueStatus::kClosed) released.fetch_add(1);
  });
  closer.join();
  r.operations = items;
  r.expected = static_cast<double>(items);
  r.observed = static_cast<double>(once);
  r.lost_updates = items - once - twice;
  r.ops_per_second = static_cast<double>(items) / std::max(elapsed, 1e-9);
  r.broken = once != items || released.load() != consumers;
  r.verdict = r.broken ? fmt::format("BROKEN: {} duplicated, {} released by close()", twice, released.load())
                       : fmt::format("every item once; close() released {} consumers", consumers);
  return r;
}

// defaults: each thread builds under its own default graph and must see only its own nodes; a thread that
// continues another's graph without installing it must get a GraphError, and succeed once it does.
RaceRow defaults(const RaceOptions& o) {
  RaceRow r = make_row("defaults", "thread-local", o);
  std::atomic<int> isolated{0}, refused{0}, continued{0};
  auto shared = std::make_shared<Graph>();
  Output seed_node = shared->placeholder("x", DType::kF32, Shape{2});
  auto start = Clock::now();
  run_threads(o.threads, [&](int t) {
    Graph& mine = default_graph();
    const int before = mine.size();
    for (std::int64_t i = 0; i < o.iterations; ++i) mine.scalar(static_cast<float>(t));
    bool ok = mine.size() == before + o.iterations;
    for (int id = before; id < mine.size() && ok; ++id) ok = mine.node(id).value.item() == static_cast<float>(t);
    isolated.fetch_add(ok ? 1 : 0);
    try {
      default_graph().add("Relu", {seed_node});
    } catch (const GraphError&) {
      refused.fetch_add(1);
    }
  });
  // Continuing the shared graph from another thread works once its defaults are installed there.
  std::thread cont([&] {
    auto scope = shared->as_default();
    default_graph().add("Relu", {seed_node});
    continued.fetch_add(1);
  });
  cont.join();
  const double elapsed = seconds_since(start);
  r.operations = o.threads * o.iterations;
  r.expected = o.threads;
  r.observed = std::min(isolated.load(), refused.load());
  r.ops_per_second = static_cast<double>(r.operations) / std::max(elapsed, 1e-9);
  r.broken = isolated.load() != o.threads || refused.load() != o.threads || continued.load() != 1;
  r.verdict = r.broken ? "BROKEN: a thread saw another's graph" : "each thread saw only its own graph";
  return r;
}

}  // namespace

// train, mirrored: the same work (batches of 32 rows, `iterations` of them in all) with no variable shared:
// `threads` replicas, each with its own copy of the variables, in lock-free mode since no other thread ever
// writes them; a step gives each replica one batch of 32 (a global batch of 32 x threads), all-reduces the
// gradients and applies the same update to every copy. Each replica's step counter counts the steps that
// stuck, and every replica must hold the first one's bits.
RaceRow run_mirrored_train(const RaceOptions& o) {
  RaceRow r = make_row("train", "mirrored", o);
  ModelOptions mo;
  mo.optimizer.locking = LockingMode::kNone;
  mo.seed = o.seed;
  mo.inter_op_threads = 1;
  mo.intra_op_threads = 1;
  mo.replica_devices.assign(static_cast<std::size_t>(std::max(o.threads, 2)), "cpu");
  std::vector<std::shared_ptr<Sequential>> nets;
  for (std::size_t k = 0; k < mo.replica_devices.size(); ++k)
    nets.push_back(std::make_shared<Sequential>(
        Sequential::from_json(race_train_spec(), "race-check", "", o.seed, LockingMode::kNone)));
  Model model(std::move(nets), mo);
  const auto replicas = static_cast<std::int64_t>(model.replicas());
  const RaceBatches data = race_batches(o.seed, 32 * replicas);
  const auto batches = static_cast<std::int64_t>(data.xs.size());
  const std::int64_t steps = std::max<std::int64_t>(1, o.iterations / replicas);
  auto start = Clock::now();
  for (std::int64_t i = 0; i < steps; ++i) {
    const auto k = static_cast<std::size_t>(i % batches);
    model.train_batch(data.xs[k], data.ys[k], i);
  }
  const double elapsed = seconds_since(start);
  r.threads = model.replicas();
  record_updates(r, steps * replicas, static_cast<double>(steps), model.optimizer().iterations(), elapsed);
  // A replica that drifted from the first would be an update lost to it: counted as one.
  const auto first = model.replica_net(0).variables();
  for (int k = 1; k < model.replicas(); ++k) {
    const auto& vars = model.replica_net(k).variables();
    for (std::size_t i = 0; i < vars.size(); ++i)
      if (vars[i]->read().to_floats() != first[i]->read().to_floats()) ++r.lost_updates;
  }
  r.final_loss = metric(Trainer(model).evaluate(data.digits, 256), "loss");
  judge(r, true, true);
  if (!r.broken) r.verdict = "consistent, no lock: each replica writes only its own copy";
  return r;
}

const std::vector<std::string>& race_scenario_names() {
  static const std::vector<std::string> names{"counter", "sgd", "train", "torn-read", "queue", "defaults"};
  return names;
}

bool race_scenario_uses_modes(const std::string& scenario) { return scenario != "queue" && scenario != "defaults"; }

bool race_scenario_runs_on_devices(const std::string& scenario) {
  return scenario == "counter" || scenario == "sgd" || scenario == "train";
}

RaceRow run_race_scenario(const std::string& scenario, LockingMode mode, const RaceOptions& o) {
  if (scenario == "counter") return counter(mode, o);
  if (scenario == "sgd") return sgd(mode, o);
  if (scenario == "train") return train(mode, o);
  if (scenario == "torn-read") return torn_read(mode, o);
  if (scenario == "queue") return queue(o);
  if (scenario == "defaults") return defaults(o);
  TCTL_CHECK(false, "unknown scenario " + scenario);
}

std::string explain_locking_mode(LockingMode mode) {
  switch (mode) {
    case LockingMode::kNone:
      return "no synchronization: concurrent read-modify-writes lose updates and reads may tear. "
             "TensorFlow: use_locking=false on ref variables (Hogwild).";
    case LockingMode::kMutex:
      return "one lock per variable for the whole update: no update lost, no read torn; updates of one "
             "variable serialize. TensorFlow: use_locking=true, and the exclusive lock of dense resource updates.";
    case LockingMode::kProcess:
      return "one lock for the whole process: safe, but updates of different variables serialize too. "
             "TensorFlow.NET: Locks.ProcessWide.";
    case LockingMode::kAtomic:
      return "lock-free compare-and-swap per element: no update lost, but a read copies element by element "
             "and may mix two versions. TensorFlow: no direct counterpart; Hogwild with atomic adds.";
    case LockingMode::kSnapshot:
      return "copy-on-write versions: a reader gets an immutable snapshot without a lock, writers serialize "
             "and publish a new version. TensorFlow: resource variables' copy-on-write.";
    case LockingMode::kDataflow:
      return "no lock: the updates sit in one graph and control dependencies order them, so the executor "
             "serializes them. TensorFlow: automatic control dependencies in tf.function.";
  }
  return {};
}

GraphConflictReport check_training_graph(const TrainConfig& config) {
  GraphConflictReport report;
  auto describe = [](const Graph& g, const std::vector<VariableConflict>& conflicts) {
    std::vector<std::string> out;
    for (const auto& c : conflicts)
      out.push_back(g.node(c.first).name + " <-> " + g.node(c.second).name + " on " + c.variable);
    return out;
  };
  for (bool auto_deps : {false, true}) {
    std::unique_ptr<Model> model = build_model(config, auto_deps);
    const Graph& g = model->training_graph();
    report.nodes = g.size();
    (auto_deps ? report.with_auto_deps : report.without_auto_deps) = describe(g, find_unordered_conflicts(g));
  }
  return report;
}

}  // namespace tctl
