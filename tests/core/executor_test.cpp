#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "core/autodiff.h"
#include "core/errors.h"
#include "core/kernel_context.h"
#include "core/scalar_spec.h"
#include "core/session.h"

using namespace tctl;
using testing::scalar_spec;

namespace {
// A test op that waits (up to 10 s) until `n` instances are running at once, then records whether they
// met. Proves that independent nodes run concurrently without measuring any time.
struct Meeting {
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  int want = 2;
  std::atomic<int> met{0};
  std::atomic<int> runs{0};
};
Meeting g_meeting;

// Arrives at g_meeting and waits (up to 10 s) until `want` participants are there at once; counts itself in
// `met` when they were.
void arrive_and_wait() {
  std::unique_lock lock(g_meeting.mu);
  ++g_meeting.arrived;
  g_meeting.runs.fetch_add(1);
  g_meeting.cv.notify_all();
  if (g_meeting.cv.wait_for(lock, std::chrono::seconds(10), [] { return g_meeting.arrived >= g_meeting.want; }))
    g_meeting.met.fetch_add(1);
}

void meet_cpu(KernelContext& ctx) {
  arrive_and_wait();
  ctx.output().mutable_data<float>()[0] = 1.0f;
}

// Runs `sum` once on `inter` inter-op threads with g_meeting expecting `want` participants; returns how
// many met.
int meetings_in_one_run(const std::shared_ptr<Graph>& g, Output sum, int want, int inter) {
  g_meeting.arrived = 0;
  g_meeting.met = 0;
  g_meeting.want = want;
  ThreadPool inter_pool(inter), intra(1);
  Session s(g, inter_pool, intra);
  CHECK(s.run({}, std::vector<Output>{sum})[0].item() == static_cast<float>(want));
  return g_meeting.met;
}

void fail_cpu(KernelContext& ctx) { throw RuntimeError("kernel " + ctx.node().name + " failed on purpose"); }

}  // namespace

TCTL_REGISTER_OP({.name = "TestMeet", .num_inputs = 0, .infer = scalar_spec});
TCTL_REGISTER_OP({.name = "TestMeetAfter", .num_inputs = 1, .infer = scalar_spec});
TCTL_REGISTER_OP({.name = "TestFail", .num_inputs = 1, .infer = same_as_input(0)});
TCTL_REGISTER_KERNEL("TestMeet", "cpu", meet_cpu);
TCTL_REGISTER_KERNEL("TestMeetAfter", "cpu", meet_cpu);
TCTL_REGISTER_KERNEL("TestFail", "cpu", fail_cpu);

TEST_CASE("independent nodes run at the same time with two inter-op threads") {
  auto g = std::make_shared<Graph>();
  Output a = g->add("TestMeet", {});
  Output b = g->add("TestMeet", {});
  Output sum = g->add("Add", {a, b});
  g_meeting.arrived = 0;
  g_meeting.met = 0;
  ThreadPool inter(2), intra(1);
  Session s(g, inter, intra);
  std::vector<Output> fetch{sum};
  CHECK(s.run({}, fetch)[0].item() == 2.0f);
  CHECK(g_meeting.met == 2);
}

TEST_CASE("a data edge orders nodes even with many threads") {
  auto g = std::make_shared<Graph>();
  Output x = g->placeholder("x", DType::kF32, Shape{4});
  Output y = x;
  for (int i = 0; i < 50; ++i) y = g->add("Scale", {y}, Attrs{{"factor", 2.0}});
  ThreadPool inter(4), intra(2);
  Session s(g, inter, intra);
  std::vector<Feed> feeds{{x, Tensor::filled(Shape{4}, 1.0f)}};
  std::vector<Output> fetch{y};
  CHECK(s.run(feeds, fetch)[0].to_floats()[3] == static_cast<float>(1ull << 50));
}

TEST_CASE("a kernel's exception reaches Session::run's caller, and the session still works") {
  auto g = std::make_shared<Graph>();
  Output x = g->placeholder("x", DType::kF32, Shape{2});
  Output bad = g->add("TestFail", {x});
  Output good = g->add("Relu", {x});
  ThreadPool inter(2), intra(1);
  Session s(g, inter, intra);
  std::vector<Feed> feeds{{x, Tensor::filled(Shape{2}, 1.0f)}};
  std::vector<Output> both{bad, good};
  CHECK_THROWS_WITH_AS(s.run(feeds, both), doctest::Contains("failed on purpose"), RuntimeError);
  std::vector<Output> only_good{good};
  CHECK(s.run(feeds, only_good)[0].to_floats() == std::vector<float>{1, 1});
}

TEST_CASE("an unfed placeholder and a wrongly shaped feed are refused") {
  auto g = std::make_shared<Graph>();
  Output x = g->placeholder("x", DType::kF32, Shape{-1, 3});
  Output y = g->add("Relu", {x});
  ThreadPool inter(1), intra(1);
  Session s(g, inter, intra);
  std::vector<Output> fetch{y};
  CHECK_THROWS_AS(s.run({}, fetch), RuntimeError);
  std::vector<Feed> bad{{x, Tensor::filled(Shape{2, 4}, 1.0f)}};
  CHECK_THROWS_AS(s.run(bad, fetch), ShapeError);
}

TEST_CASE("only the nodes needed for the fetches run") {
  auto g = std::make_shared<Graph>();
  g_meeting.runs = 0;
  g_meeting.want = 1;
  Output unused = g->add("TestMeet", {});
  (void)unused;
  Output c = g->scalar(3.0f);
  ThreadPool inter(1), intra(1);
  Session s(g, inter, intra);
  std::vector<Output> fetch{c};
  CHECK(s.run({}, fetch)[0].item() == 3.0f);
  CHECK(g_meeting.runs == 0);
  g_meeting.want = 2;
}

namespace {
// A test op whose parallel_for chunks each spin for a while and count how many chunks, across all nodes,
// are running at that moment, and on which threads.
struct BusyCount {
  std::atomic<int> active{0};
  std::atomic<int> max_active{0};
  std::mutex mu;
  std::set<std::thread::id> threads;
};
BusyCount g_busy;

void busy_probe_cpu(KernelContext& ctx) {
  ctx.parallel_for(8, 1, [](std::int64_t, std::int64_t) {
    const int now = g_busy.active.fetch_add(1) + 1;
    int seen = g_busy.max_active.load();
    while (now > seen && !g_busy.max_active.compare_exchange_weak(seen, now)) {
    }
    {
      std::lock_guard lock(g_busy.mu);
      g_busy.threads.insert(std::this_thread::get_id());
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(300);
    while (std::chrono::steady_clock::now() < until) {
    }
    g_busy.active.fetch_sub(1);
  });
  ctx.output().mutable_data<float>()[0] = 1.0f;
}
}  // namespace

TCTL_REGISTER_OP({.name = "TestBusyProbe", .num_inputs = 0, .infer = scalar_spec});
TCTL_REGISTER_KERNEL("TestBusyProbe", "cpu", busy_probe_cpu);

TEST_CASE("inter-op x intra-op never runs more busy threads than asked") {
  auto g = std::make_shared<Graph>();
  std::vector<Output> probes;
  for (int i = 0; i < 6; ++i) probes.push_back(g->add("TestBusyProbe", {}));
  Output sum = g->add("AddN", probes);
  for (auto [inter_n, intra_n] : {std::pair{1, 1}, {2, 1}, {1, 2}, {2, 2}, {3, 2}}) {
    INFO("inter " << inter_n << " intra " << intra_n);
    g_busy.max_active = 0;
    g_busy.threads.clear();
    ThreadPool inter(inter_n), intra(intra_n);
    Session s(g, inter, intra);
    for (int run = 0; run < 3; ++run) CHECK(s.run({}, std::vector<Output>{sum})[0].item() == 6.0f);
    // Each inter-op thread runs one node at a time and lends itself to that node's parallel_for; the
    // intra-op pool adds intra - 1 workers that all nodes share. So at most inter + intra - 1 threads are
    // busy, which never exceeds inter x intra.
    CHECK(g_busy.max_active.load() <= inter_n + intra_n - 1);
    CHECK(g_busy.max_active.load() <= inter_n * intra_n);
    CHECK(static_cast<int>(g_busy.threads.size()) <= inter_n + intra_n - 1);
  }
}

namespace {
// The chunks of one parallel_for meet as g_meeting's nodes do.
void chunk_meet_cpu(KernelContext& ctx) {
  ctx.parallel_for(g_meeting.want, 1, [](std::int64_t, std::int64_t) { arrive_and_wait(); });
  ctx.output().mutable_data<float>()[0] = 1.0f;
}
}  // namespace

TCTL_REGISTER_OP({.name = "TestChunkMeet", .num_inputs = 0, .infer = scalar_spec});
TCTL_REGISTER_KERNEL("TestChunkMeet", "cpu", chunk_meet_cpu);

TEST_CASE(
    "the pools reach the concurrency asked: three inter-op threads run three nodes at once, two intra-op threads two "
    "chunks") {
  // Lower bounds, without timing: each participant waits for the others, so a serial run would leave the
  // first one waiting alone until its 10 s are up and the count short.
  auto g = std::make_shared<Graph>();
  std::vector<Output> nodes;
  for (int i = 0; i < 3; ++i) nodes.push_back(g->add("TestMeet", {}));
  CHECK(meetings_in_one_run(g, g->add("AddN", nodes), 3, 3) == 3);

  auto chunks = std::make_shared<Graph>();
  Output one = chunks->add("TestChunkMeet", {});
  g_meeting.arrived = 0;
  g_meeting.met = 0;
  g_meeting.want = 2;
  {
    ThreadPool inter(1), intra(2);
    Session s(chunks, inter, intra);
    CHECK(s.run({}, std::vector<Output>{one})[0].item() == 1.0f);
  }
  CHECK(g_meeting.met == 2);
}

namespace {
std::atomic<int> g_after_failure{0};
void count_cpu(KernelContext& ctx) {
  g_after_failure.fetch_add(1);
  ctx.output().mutable_data<float>()[0] = 1.0f;
}
}  // namespace

TCTL_REGISTER_OP({.name = "TestCountRun", .num_inputs = 1, .infer = scalar_spec});
TCTL_REGISTER_KERNEL("TestCountRun", "cpu", count_cpu);

TEST_CASE("a kernel's error cancels the nodes not yet started") {
  // A chain behind a failing node: none of its 20 nodes may start once the failure is recorded.
  auto g = std::make_shared<Graph>();
  Output x = g->placeholder("x", DType::kF32, Shape{});
  Output y = g->add("TestFail", {x});
  for (int i = 0; i < 20; ++i) y = g->add("TestCountRun", {y});
  for (int threads : {1, 3}) {
    CAPTURE(threads);
    g_after_failure = 0;
    ThreadPool inter(threads), intra(1);
    Session s(g, inter, intra);
    const std::vector<Feed> feeds{{x, Tensor::scalar(1.0f)}};
    CHECK_THROWS_WITH_AS(s.run(feeds, std::vector<Output>{y}), doctest::Contains("failed on purpose"), RuntimeError);
    CHECK(g_after_failure == 0);
  }
}

namespace {
// Records the thread that ran it, then spins for 50 us: long enough for a worker to take what the pool
// was given meanwhile. The cost declared below, not the time taken, decides where a node runs.
std::mutex g_ran_on_mu;
std::set<std::thread::id> g_ran_on;
void record_thread_cpu(KernelContext& ctx) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
  while (std::chrono::steady_clock::now() < until) {
  }
  {
    std::lock_guard lock(g_ran_on_mu);
    g_ran_on.insert(std::this_thread::get_id());
  }
  ctx.output().mutable_data<float>()[0] = 1.0f;
}

// Runs the sum of `nodes` 100 times with two inter-op threads: every node must run on the calling thread.
void check_all_on_caller(const std::shared_ptr<Graph>& g, const std::vector<Output>& nodes) {
  Output sum = g->add("AddN", nodes);
  ThreadPool inter(2), intra(1);
  Session s(g, inter, intra);
  for (int run = 0; run < 100; ++run) {
    g_ran_on.clear();
    CHECK(s.run({}, std::vector<Output>{sum})[0].item() == static_cast<float>(nodes.size()));
    CHECK(g_ran_on == std::set{std::this_thread::get_id()});
  }
}

const PlanNode& plan_node(const Plan& plan, Output o) {
  for (const PlanNode& pn : plan.nodes)
    if (pn.node->id == o.node) return pn;
  FAIL("no plan node for graph node " << o.node);
  throw;
}
}  // namespace

TCTL_REGISTER_OP({.name = "TestRecordThread", .num_inputs = -1, .infer = scalar_spec, .cost = elements_cost});
TCTL_REGISTER_KERNEL("TestRecordThread", "cpu", record_thread_cpu);
// The same, declared worth a thread of its own.
TCTL_REGISTER_OP({.name = "TestRecordThreadCostly",
                  .num_inputs = -1,
                  .infer = scalar_spec,
                  .cost = [](std::span<const TensorSpec>, const TensorSpec&, const Attrs&) {
                    return std::int64_t{1} << 30;
                  }});
TCTL_REGISTER_KERNEL("TestRecordThreadCostly", "cpu", record_thread_cpu);

TEST_CASE("nodes too cheap to hand off run on the thread that made them ready, with any number of inter-op threads") {
  // Four cheap roots, each read by three cheap nodes: handing any root or any of its readers to the pool's
  // worker would put the worker's thread in the set.
  auto g = std::make_shared<Graph>();
  std::vector<Output> nodes;
  for (int i = 0; i < 4; ++i) {
    Output root = g->add("TestRecordThread", {});
    for (int j = 0; j < 3; ++j) nodes.push_back(g->add("TestRecordThread", {root}));
  }
  check_all_on_caller(g, nodes);
}

TEST_CASE("a costly node with nothing to run beside it stays on the thread that made it ready, after the cheap ones") {
  // The costly node reads the second root, which the caller runs first: it becomes ready while five
  // cheap roots are still to run. Handing it to the pool then would move its inputs to another core for
  // no overlap.
  auto g = std::make_shared<Graph>();
  std::vector<Output> nodes;
  for (int i = 0; i < 6; ++i) nodes.push_back(g->add("TestRecordThread", {}));
  SUBCASE("the costly node alone") {}
  SUBCASE("after a cheap reader of the same root, which becomes ready first") {
    nodes.push_back(g->add("TestRecordThread", {nodes[1]}));
  }
  nodes.push_back(g->add("TestRecordThreadCostly", {nodes[1]}));
  check_all_on_caller(g, nodes);
}

TEST_CASE("costly nodes ready at once on one thread all but one go to the other inter-op threads") {
  // A cheap root read by two cheap nodes, each read by a node that waits for the other one: they meet
  // only if the thread that makes them ready keeps one and hands the other off.
  auto g = std::make_shared<Graph>();
  Output root = g->add("TestRecordThread", {});
  Output a = g->add("TestMeetAfter", {g->add("Relu", {root})});
  Output b = g->add("TestMeetAfter", {g->add("Relu", {root})});
  CHECK(meetings_in_one_run(g, g->add("AddN", {a, b}), 2, 2) == 2);
}

TEST_CASE("a node is handed off when its cost is unknown or at least 2^18 multiply-adds or elements") {
  constexpr std::int64_t kWorthIt = std::int64_t{1} << 18;
  Graph g;
  Output x = g.placeholder("x", DType::kF32, Shape{-1, 784});
  Output w = g.constant(Tensor::zeros(DType::kF32, Shape{784, 512}));
  Output big = g.add("MatMul", {x, w});  // 128 x 512 x 784 = 51M multiply-adds at batch 128
  Output small = g.add("MatMul", {x, g.constant(Tensor::zeros(DType::kF32, Shape{784, 10}))});
  Output u = g.placeholder("u", DType::kF32, Shape{-1, 64});
  Output transposed = g.add("MatMul", {u, u}, Attrs{{"transpose_a", std::int64_t{1}}});  // [64, 64], k = batch
  Output image = g.placeholder("image", DType::kF32, Shape{-1, 16, 16, 8});
  // Stride 2: the output has a quarter of the input's pixels, so costs counted on the wrong side differ.
  const Attrs window{{"strides", std::vector<std::int64_t>{2, 2}}, {"padding", std::string("same")}};
  Output kernel = g.constant(Tensor::zeros(DType::kF32, Shape{3, 3, 8, 16}));
  Output conv = g.add("Conv2D", {image, kernel}, window);
  Attrs grad_window = window;
  grad_window.set("window", std::vector<std::int64_t>{3, 3});
  // Both gradients take as many multiply-adds as the convolution.
  Output input_grad = g.add("Conv2DInputGrad", {conv, kernel, image}, grad_window);
  Output kernel_grad = g.add("Conv2DKernelGrad", {image, conv}, grad_window);
  Output relu = g.add("Relu", {big});
  Output delay = g.add("Delay", {small}, Attrs{{"ms", 0.0}});
  Output meet = g.add("TestMeet", {});  // no declared cost
  // The fused ops count as their products do.
  Output fused_small = g.add(
      "FusedMatMul",
      {x, g.constant(Tensor::zeros(DType::kF32, Shape{784, 10})), g.constant(Tensor::zeros(DType::kF32, Shape{10}))},
      Attrs{{"activation", std::string("relu")}});
  Attrs fused_window = window;
  fused_window.set("activation", std::string("relu"));
  Output fused_conv =
      g.add("FusedConv2D", {image, kernel, g.constant(Tensor::zeros(DType::kF32, Shape{16}))}, fused_window);
  // 2^32 x 2^32 times 2^32 x 2^32: more multiply-adds than an int64 holds, so unknown, not wrapped around.
  Output huge_a = g.placeholder("huge_a", DType::kF32, Shape{-1, -1});
  Output huge = g.add("MatMul", {huge_a, huge_a});
  const std::vector<Output> targets{transposed, input_grad,  kernel_grad, relu, delay,
                                    meet,       fused_small, fused_conv,  huge};
  // At 64 the transposed product, at 256 the Relu, cost exactly 2^18: the threshold is reached, not passed.
  for (std::int64_t batch : {32, 64, 128, 256, 2048, 8192}) {
    CAPTURE(batch);
    const std::vector<Output> feeds{x, u, image, huge_a};
    const std::vector<TensorSpec> specs{{DType::kF32, Shape{batch, 784}},
                                        {DType::kF32, Shape{batch, 64}},
                                        {DType::kF32, Shape{batch / 32, 16, 16, 8}},
                                        {DType::kF32, Shape{std::int64_t{1} << 32, std::int64_t{1} << 32}}};
    const Plan plan = build_plan(g, feeds, specs, {}, targets, {});
    CHECK(plan_node(plan, big).hand_off);
    CHECK(plan_node(plan, small).hand_off == (batch * 10 * 784 >= kWorthIt));
    CHECK(plan_node(plan, transposed).hand_off == (64 * 64 * batch >= kWorthIt));
    const bool conv_worth_it = batch / 32 * 8 * 8 * 3 * 3 * 8 * 16 >= kWorthIt;
    CHECK(plan_node(plan, conv).hand_off == conv_worth_it);
    CHECK(plan_node(plan, input_grad).hand_off == conv_worth_it);
    CHECK(plan_node(plan, kernel_grad).hand_off == conv_worth_it);
    CHECK(plan_node(plan, relu).hand_off == (batch * 512 * 2 >= kWorthIt));
    CHECK(plan_node(plan, delay).hand_off);
    CHECK(plan_node(plan, meet).hand_off);
    CHECK(plan_node(plan, fused_small).hand_off == (batch * 10 * 784 >= kWorthIt));
    CHECK(plan_node(plan, fused_conv).hand_off == conv_worth_it);
    CHECK(plan_node(plan, huge).hand_off);
    CHECK_FALSE(plan_node(plan, x).hand_off);  // a feed
  }
  // A variable read or a constant hands over a buffer it holds, whatever its size.
  const TensorSpec large{DType::kF32, Shape{1 << 12, 1 << 12}};
  for (const char* op : {"ReadVariable", "Const", "Placeholder"}) {
    CAPTURE(op);
    CHECK(op_def(op).cost({}, large, Attrs{}) == 0);
  }
}
