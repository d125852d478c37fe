// Device graphs (core/device_graph.h) on the simulated device, which records the way a GPU captures a CUDA
// graph and refuses, where a GPU would silently go wrong, a replay that allocates.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/collective.h"
#include "core/device_graph.h"
#include "core/kernel_context.h"
#include "core/op_registry.h"
#include "core/ops/state.h"
#include "core/session.h"
#include "core/variable.h"
#include "kernels/sim/sim_device.h"

using namespace tctl;

namespace {

Device* sim1() { return DeviceRegistry::instance().find("sim:1"); }

// A kernel that waits for its device's stream, which a recording cannot hold: on sim, its segment must run
// eagerly.
void waiting_identity(KernelContext& ctx) {
  ctx.device().synchronize();
  const Tensor& in = ctx.input(0);
  copy_between(ctx.device(), in.raw_data(), ctx.device(), ctx.output().raw_mutable_data(), in.bytes());
}
[[maybe_unused]] const bool registered =
    register_op({.name = "GraphTestWaitingIdentity", .infer = same_as_input(0)}) &&
    register_kernel("GraphTestWaitingIdentity", DeviceKind::cpu(), waiting_identity) &&
    register_kernel("GraphTestWaitingIdentity", device_kind("sim"), waiting_identity);

// w = w / 2 + 1, with the variable taken when the kernel is called and the arithmetic queued on the stream,
// as a GPU kernel's update is: recorded, the taking happens once, at the recording, and only the arithmetic
// is replayed. Its output is x, passed on.
void halve_var_plus_one(KernelContext& ctx) {
  Variable::Update update(ctx.var(0));
  float* p = update.device_data();
  const std::int64_t n = update.size();
  ctx.device().enqueue([p, n] {
    for (std::int64_t i = 0; i < n; ++i) p[i] = p[i] * 0.5f + 1.0f;
  });
  const Tensor& in = ctx.input(0);
  copy_between(ctx.device(), in.raw_data(), ctx.device(), ctx.output().raw_mutable_data(), in.bytes());
}
[[maybe_unused]] const bool registered_update =
    register_op({.name = "GraphTestHalveVarPlusOne", .infer = same_as_input(0)}) &&
    register_kernel("GraphTestHalveVarPlusOne", DeviceKind::cpu(), halve_var_plus_one) &&
    register_kernel("GraphTestHalveVarPlusOne", device_kind("sim"), halve_var_plus_one);

// x [2, 4] -> MatMul with w and Relu on sim:1 -> `between` on the CPU -> MatMul with w on sim:1 again; the
// CPU part in the middle makes the second sim part a segment of its own, at level 1.
struct TwoPartNet {
  std::shared_ptr<Graph> g = std::make_shared<Graph>();
  std::shared_ptr<Variable> w;
  Output x, first, between, out;
  explicit TwoPartNet(const std::string& op_between = "Relu", const std::string& last_op = "MatMul") {
    std::vector<float> wv(16);
    for (std::size_t i = 0; i < wv.size(); ++i) wv[i] = 0.1f * static_cast<float>(i) - 0.7f;
    w = std::make_shared<Variable>("w", Tensor::from_floats(Shape{4, 4}, wv));
    x = g->placeholder("x", DType::kF32, Shape{-1, 4});
    {
      Graph::Scope scope(*g, "first", "sim:1", Phase::kForward);
      first = g->add("Relu", {g->add("MatMul", {x, g->read(w)})});
    }
    {
      Graph::Scope scope(*g, "between", "cpu", Phase::kForward);
      between = g->add(op_between, {first});
    }
    Graph::Scope scope(*g, "last", "sim:1", Phase::kForward);
    out =
        g->add(last_op, last_op == "MatMul" ? std::vector<Output>{between, g->read(w)} : std::vector<Output>{between});
  }
};

std::vector<Feed> feed_x_to(Output x, float shift) {
  std::vector<float> v{1, -2, 3, 0.5f, -1, 2, 0.25f, 4};
  for (float& f : v) f += shift;
  return {{x, Tensor::from_floats(Shape{2, 4}, v)}};
}
std::vector<Feed> feed_x(const TwoPartNet& net, float shift) { return feed_x_to(net.x, shift); }

// Whether `net` run in `s` gives what `reference` gives run eagerly, both fed the same x.
bool same_as_eager(Session& s, const TwoPartNet& net, const TwoPartNet& reference, ThreadPool& inter,
                   ThreadPool& intra) {
  Session eager(reference.g, inter, intra);
  return s.run(feed_x(net, 0), std::vector<Output>{net.out})[0].to_floats() ==
         eager.run(feed_x(reference, 0), std::vector<Output>{reference.out})[0].to_floats();
}

Plan plan_of(const TwoPartNet& net) {
  const TensorSpec fed{DType::kF32, Shape{2, 4}};
  const std::vector<Output> feeds{net.x}, fetches{net.out};
  Plan plan = build_plan(*net.g, feeds, std::span(&fed, 1), fetches, {}, {});
  plan_device_graphs(plan);
  return plan;
}

std::vector<std::string> names(const Plan& plan, const std::vector<int>& nodes) {
  std::vector<std::string> out;
  for (int i : nodes) out.push_back(plan.nodes[static_cast<std::size_t>(i)].node->name);
  std::sort(out.begin(), out.end());
  return out;
}

struct Logged {
  std::vector<std::string> lines;
  SessionOptions options(bool graphs) {
    SessionOptions so;
    so.device_graphs = graphs;
    so.placement.log = [this](const std::string& line) {
      if (line.rfind("device graph: ", 0) == 0) lines.push_back(line);
    };
    return so;
  }
  bool has(const std::string& text) const {
    return std::any_of(lines.begin(), lines.end(),
                       [&](const std::string& l) { return l.find(text) != std::string::npos; });
  }
};

// A TwoPartNet in a session with device graphs on, one thread each, logging what the graphs do.
struct GraphSession {
  explicit GraphSession(const std::string& op_between = "Relu", const std::string& last_op = "MatMul")
      : net(op_between, last_op), s(net.g, inter, intra, log.options(true)) {}
  TwoPartNet net;
  ThreadPool inter{1}, intra{1};
  Logged log;
  Session s;
  bool same_as_eager(const TwoPartNet& reference) { return ::same_as_eager(s, net, reference, inter, intra); }
};

}  // namespace

TEST_CASE("sim records work instead of running it, replays it whole each launch, and refuses what cannot replay") {
  Device& sim = *sim1();
  int runs = 0;
  std::unique_ptr<Recording> recording = sim.begin_recording();
  REQUIRE(recording != nullptr);
  sim.enqueue([&] { ++runs; });
  float host[2] = {1.5f, -2.0f};
  void* block = sim.allocate(sizeof host);  // allowed while recording
  sim.copy_from_host(block, host, sizeof host);
  host[1] = 7.0f;  // the recording holds the bytes the copy saw
  CHECK_THROWS_WITH_AS(sim.synchronize(), "sim:1: waiting for the stream cannot be recorded", RuntimeError);
  float back[2] = {0, 0};
  CHECK_THROWS_WITH_AS(sim.copy_to_host(back, block, sizeof back), "sim:1: a copy to the host cannot be recorded",
                       RuntimeError);
  std::unique_ptr<Replay> replay = recording->finish();
  recording.reset();
  CHECK(runs == 0);
  replay->launch(0);
  replay->launch(0);
  sim.synchronize();
  CHECK(runs == 2);
  sim.copy_to_host(back, block, sizeof back);
  CHECK(back[1] == -2.0f);
  sim.deallocate(block, sizeof host);

  // An allocation inside a replay would, on a GPU, get another address than the one captured.
  recording = sim.begin_recording();
  sim.enqueue([&] { sim.deallocate(sim.allocate(64), 64); });
  replay = recording->finish();
  recording.reset();
  replay->launch(0);
  CHECK_THROWS_WITH_AS(sim.synchronize(), doctest::Contains("an allocation of 64 bytes while replaying"), RuntimeError);
  // The device is usable afterwards, and the CPU records nothing.
  sim.synchronize();
  CHECK(cpu_device()->begin_recording() == nullptr);
}

TEST_CASE("a device's nodes split into segments where a path leaves the device and comes back") {
  TwoPartNet net;
  const Plan plan = plan_of(net);
  REQUIRE(plan.graph_segments.size() == 2);
  const GraphSegment& a = plan.graph_segments[0];
  const GraphSegment& b = plan.graph_segments[1];
  CHECK(a.device == sim1());
  CHECK(a.level == 0);
  CHECK(b.level == 1);
  // A variable read has no input: it joins level 0, and lends its buffer to the later segment too.
  CHECK(names(plan, a.members) == std::vector<std::string>{"first/MatMul", "first/ReadVariable", "first/Relu",
                                                           "last/ReadVariable", "x/copy_to_sim:1"});
  CHECK(names(plan, a.staged) == std::vector<std::string>{"x/copy_to_sim:1"});
  CHECK(names(plan, b.members) == std::vector<std::string>{"between/Relu/copy_to_sim:1", "last/MatMul"});
  CHECK(b.outside.empty());
  CHECK(b.vars == std::vector<Variable*>{net.w.get()});
  CHECK(a.vars == std::vector<Variable*>{net.w.get()});
  CHECK(a.refused.empty());
  CHECK(b.refused.empty());
  // The run's order: x, segment 0, the copy to the host, Relu on the CPU, segment 1, the fetch's copy.
  std::vector<std::string> order;
  for (int e : plan.graph_order)
    order.push_back(e < 0 ? "segment " + std::to_string(-1 - e) : plan.nodes[static_cast<std::size_t>(e)].node->name);
  CHECK(order == std::vector<std::string>{"x", "segment 0", "first/Relu/copy_to_cpu", "between/Relu", "segment 1",
                                          "last/MatMul/copy_to_cpu"});
}

TEST_CASE("a plan without a device that records has no segments") {
  TwoPartNet net;
  for (const Node& n : net.g->nodes()) const_cast<Node&>(n).device = "cpu";
  CHECK(plan_of(net).graph_segments.empty());
}

TEST_CASE("replayed segments give what eager runs give, for new inputs each run, and allocate nothing") {
  TwoPartNet eager_net, graph_net;
  ThreadPool inter(2), intra(1);
  Logged log;
  Session eager(eager_net.g, inter, intra), graphs(graph_net.g, inter, intra, log.options(true));
  std::uint64_t fresh = 0;
  for (int step = 0; step < 8; ++step) {
    const auto shift = static_cast<float>(step) * 0.25f;
    const Tensor want = eager.run(feed_x(eager_net, shift), std::vector<Output>{eager_net.out})[0];
    const Tensor got = graphs.run(feed_x(graph_net, shift), std::vector<Output>{graph_net.out})[0];
    CHECK(got.to_floats() == want.to_floats());
    if (step == 2) fresh = sim1()->memory_stats().fresh_blocks;
  }
  // Run 1 warms up, run 2 records and launches both segments, runs 3 to 8 replay them.
  CHECK(graphs.device_graph_replays() == 12);
  CHECK(sim1()->memory_stats().fresh_blocks == fresh);
  CHECK(log.has("sim:1 segment 0 (level 0, 5 nodes): recorded"));
  CHECK(log.has("sim:1 segment 1 (level 1, 2 nodes): recorded"));
}

TEST_CASE("two devices get segments of their own; a value from the other one is staged through the host") {
  // x -> MatMul with w0, Relu on sim:0 -> MatMul with w1 on sim:1, fetched.
  auto make = [](std::shared_ptr<Graph>& g, Output& x) {
    g = std::make_shared<Graph>();
    auto w0 = std::make_shared<Variable>("w0", Tensor::filled(Shape{4, 4}, 0.25f));
    auto w1 = std::make_shared<Variable>("w1", Tensor::filled(Shape{4, 2}, -0.5f));
    x = g->placeholder("x", DType::kF32, Shape{-1, 4});
    Output a;
    {
      Graph::Scope scope(*g, "a", "sim:0", Phase::kForward);
      a = g->add("Relu", {g->add("MatMul", {x, g->read(w0)})});
    }
    Graph::Scope scope(*g, "b", "sim:1", Phase::kForward);
    return g->add("MatMul", {a, g->read(w1)});
  };
  std::shared_ptr<Graph> g, g_eager;
  Output x, x_eager;
  const Output out = make(g, x), out_eager = make(g_eager, x_eager);
  ThreadPool inter(1), intra(1);
  Logged log;
  Session s(g, inter, intra, log.options(true)), eager(g_eager, inter, intra);
  for (int step = 0; step < 6; ++step) {
    std::vector<float> v(8);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(step) - static_cast<float>(i) * 0.5f;
    const Tensor got = s.run(std::vector<Feed>{{x, Tensor::from_floats(Shape{2, 4}, v)}}, std::vector<Output>{out})[0];
    const Tensor want =
        eager.run(std::vector<Feed>{{x_eager, Tensor::from_floats(Shape{2, 4}, v)}}, std::vector<Output>{out_eager})[0];
    CHECK(got.to_floats() == want.to_floats());
  }
  CHECK(s.device_graph_replays() == 8);
  CHECK(log.has("sim:0 segment 0 (level 0, 4 nodes): recorded"));
  CHECK(log.has("sim:1 segment 0 (level 0, 3 nodes): recorded"));
}

TEST_CASE("a variable assigned in place between runs is replayed with its new value") {
  GraphSession g;
  TwoPartNet reference;
  for (int i = 0; i < 6; ++i) {
    // Nobody holds w's buffer (the frame lets go of its reads once recorded): the assignment writes in place.
    const std::vector<float> wv(16, 0.1f * static_cast<float>(i));
    g.net.w->assign(Tensor::from_floats(Shape{4, 4}, wv));
    reference.w->assign(Tensor::from_floats(Shape{4, 4}, wv));
    CHECK(g.same_as_eager(reference));
  }
  CHECK(g.s.device_graph_replays() == 8);
}

TEST_CASE("a variable whose buffer moves is recorded again, and after four moves in a row runs eagerly") {
  GraphSession g;
  for (int i = 0; i < 3; ++i) g.s.run(feed_x(g.net, 0), std::vector<Output>{g.net.out});
  const std::uint64_t replays = g.s.device_graph_replays();
  // A value read of w is held while w is assigned, so the assignment copies w's buffer first: it moves.
  TwoPartNet reference;
  for (int i = 0; i < 4; ++i) {
    std::vector<float> wv(16, 0.05f * static_cast<float>(i + 1));
    const Tensor held = g.net.w->read();
    g.net.w->assign(Tensor::from_floats(Shape{4, 4}, wv));
    reference.w->assign(Tensor::from_floats(Shape{4, 4}, wv));
    CHECK(g.same_as_eager(reference));
  }
  CHECK(g.log.has("recorded again: the variable w moved"));
  CHECK(g.log.has("runs eagerly: the variable w moved in 4 runs in a row"));
  CHECK(g.s.device_graph_replays() == replays);
}

// x -> MatMul with a read r of w -> an update of w (GraphTestHalveVarPlusOne), all on sim:1, and with
// `read_again`, a MatMul of that with r once more. Run `steps` times with device graphs and eagerly, each
// step's output and w compared; returns the replays.
namespace {
std::uint64_t update_after_read(bool read_again, int steps, Logged& log) {
  struct Net {
    std::shared_ptr<Graph> g = std::make_shared<Graph>();
    std::shared_ptr<Variable> w =
        std::make_shared<Variable>("w", Tensor::from_floats(Shape{4, 4}, std::vector<float>(16, 0.25f)));
    Output x = g->placeholder("x", DType::kF32, Shape{-1, 4}), out;
    explicit Net(bool read_again) {
      Graph::Scope scope(*g, "step", "sim:1", Phase::kForward);
      const Output r = g->read(w);
      out = g->add("GraphTestHalveVarPlusOne", {g->add("MatMul", {x, r})}, {}, {VarUse{w, true}});
      if (read_again) out = g->add("MatMul", {out, r});
    }
  } eager_net(read_again), graph_net(read_again);
  ThreadPool inter(1), intra(1);
  Session eager(eager_net.g, inter, intra), graphs(graph_net.g, inter, intra, log.options(true));
  for (int step = 0; step < steps; ++step) {
    CAPTURE(step);
    const auto shift = static_cast<float>(step);
    CHECK(graphs.run(feed_x_to(graph_net.x, shift), std::vector<Output>{graph_net.out})[0].to_floats() ==
          eager.run(feed_x_to(eager_net.x, shift), std::vector<Output>{eager_net.out})[0].to_floats());
    CHECK(graph_net.w->read().to_floats() == eager_net.w->read().to_floats());
  }
  return graphs.device_graph_replays();
}
}  // namespace

TEST_CASE("an update after a read of its variable in one segment writes in place, recorded or replayed") {
  // The recording lets the read go once its reader has run, as an eager run does, so the update takes w's
  // own buffer: had it copied w (the read still holding it), every replay would copy the recording's w over
  // the current one before updating.
  Logged log;
  CHECK(update_after_read(false, 6, log) == 4);
  CHECK_FALSE(log.has("recorded again"));
}

TEST_CASE("a segment that reads a variable after updating it in place runs node by node, saying so") {
  // Node by node, the update copies w first (r still holds its buffer); a replay would copy the recording's
  // w every time.
  Logged log;
  CHECK(update_after_read(true, 4, log) == 0);
  CHECK(
      log.has("runs eagerly: node step/MatMul_1 reads variable w after step/GraphTestHalveVarPlusOne updates it, "
              "which a replay cannot follow"));
}

TEST_CASE("a segment that runs eagerly reads again a variable whose read another segment's replay let go") {
  // A read of w feeds a MatMul on sim:1, which records and replays (emptying the read's slot), and a copy
  // to sim:0, whose segment waits for its stream and so runs node by node: its copy must read w again.
  struct Net {
    std::shared_ptr<Graph> g = std::make_shared<Graph>();
    std::shared_ptr<Variable> w =
        std::make_shared<Variable>("w", Tensor::from_floats(Shape{4, 4}, std::vector<float>(16, 0.25f)));
    Output x = g->placeholder("x", DType::kF32, Shape{-1, 4}), a, b;
    Net() {
      Output r;
      {
        Graph::Scope scope(*g, "one", "sim:1", Phase::kForward);
        r = g->read(w);
        a = g->add("MatMul", {x, r});
      }
      Graph::Scope scope(*g, "zero", "sim:0", Phase::kForward);
      b = g->add("GraphTestWaitingIdentity", {g->add("MatMul", {x, r})});
    }
  } eager_net, graph_net;
  ThreadPool inter(1), intra(1);
  Logged log;
  Session eager(eager_net.g, inter, intra), graphs(graph_net.g, inter, intra, log.options(true));
  for (int step = 0; step < 5; ++step) {
    CAPTURE(step);
    const std::vector<float> wv(16, 0.5f + static_cast<float>(step));
    graph_net.w->assign(Tensor::from_floats(Shape{4, 4}, wv));
    eager_net.w->assign(Tensor::from_floats(Shape{4, 4}, wv));
    const std::vector<Tensor> got =
        graphs.run(feed_x_to(graph_net.x, 0), std::vector<Output>{graph_net.a, graph_net.b});
    const std::vector<Tensor> want =
        eager.run(feed_x_to(eager_net.x, 0), std::vector<Output>{eager_net.a, eager_net.b});
    CHECK(got[0].to_floats() == want[0].to_floats());
    CHECK(got[1].to_floats() == want[1].to_floats());
  }
  CHECK(log.has("sim:1 segment 0 (level 0, 3 nodes): recorded"));
  CHECK(log.has("sim:0 segment 0 (level 0, 4 nodes): runs eagerly: recording failed"));
}

TEST_CASE("a segment whose recording fails runs eagerly, with the same results, and says why") {
  GraphSession g("Relu", "GraphTestWaitingIdentity");
  TwoPartNet reference("Relu", "GraphTestWaitingIdentity");
  for (int i = 0; i < 4; ++i) CHECK(g.same_as_eager(reference));
  CHECK(
      g.log.has("sim:1 segment 1 (level 1, 2 nodes): runs eagerly: recording failed: sim:1: waiting for the stream "
                "cannot be recorded"));
  // The first segment still replays.
  CHECK(g.s.device_graph_replays() == 2);
}

TEST_CASE("a recording the device cannot make ready to launch leaves its segment eager, with the same results") {
  GraphSession gs;
  static_cast<SimDevice*>(sim1())->fail_next_finish();
  for (int run = 0; run < 3; ++run) {
    CAPTURE(run);
    CHECK(gs.same_as_eager(TwoPartNet()));
  }
  CHECK(
      gs.log.has("segment 0 (level 0, 5 nodes): runs eagerly: recording failed: sim:1: the recording could not be "
                 "made ready to launch"));
  CHECK(gs.log.has("segment 1 (level 1, 2 nodes): recorded"));  // the next recording was made as usual
}

TEST_CASE("a profiled run does not use device graphs") {
  GraphSession g;
  Profiler profiler;
  RunOptions ro;
  ro.profiler = &profiler;
  for (int i = 0; i < 3; ++i) g.s.run(feed_x(g.net, 0), std::vector<Output>{g.net.out}, {}, ro);
  CHECK(g.s.device_graph_replays() == 0);
  CHECK(g.log.has("device graph: none while profiling"));
}

namespace {
std::vector<float> run_x(Session& s, Output x, Output out, float shift) {
  return s.run(feed_x_to(x, shift), std::vector<Output>{out})[0].to_floats();
}
}  // namespace

TEST_CASE("a variable read lent to another device's segment is read again for its staged copy") {
  // r = read(w) and MatMul(x, r) on sim:0; MatMul(a, r) on sim:1 copies r across.
  auto make = [](std::shared_ptr<Graph>& g, Output& x) {
    g = std::make_shared<Graph>();
    auto w = std::make_shared<Variable>("w", Tensor::filled(Shape{4, 4}, 0.3f));
    x = g->placeholder("x", DType::kF32, Shape{-1, 4});
    Output r, a;
    {
      Graph::Scope scope(*g, "a", "sim:0", Phase::kForward);
      r = g->read(w);
      a = g->add("MatMul", {x, r});
    }
    Graph::Scope scope(*g, "b", "sim:1", Phase::kForward);
    return g->add("MatMul", {a, r});
  };
  std::shared_ptr<Graph> g, ge;
  Output x, xe;
  const Output out = make(g, x), oute = make(ge, xe);
  ThreadPool inter(1), intra(1);
  SessionOptions so;
  so.device_graphs = true;
  Session s(g, inter, intra, so), e(ge, inter, intra);
  for (int step = 0; step < 5; ++step)
    CHECK(run_x(s, x, out, static_cast<float>(step)) == run_x(e, xe, oute, static_cast<float>(step)));
  CHECK(s.device_graph_replays() == 6);
}

TEST_CASE("a variable read fetched and also used by a later segment: its segment runs eagerly, results hold") {
  TwoPartNet net, reference;
  ThreadPool inter(1), intra(1);
  Logged log;
  Session s(net.g, inter, intra, log.options(true)), e(reference.g, inter, intra);
  // first/MatMul's second input is first/ReadVariable.
  auto read_of = [](const TwoPartNet& n) {
    const int matmul = n.g->node(n.first.node).inputs[0];
    return Output{n.g->node(matmul).inputs[1]};
  };
  for (int step = 0; step < 5; ++step) {
    const auto got = s.run(feed_x(net, 0), std::vector<Output>{net.out, read_of(net)});
    const auto want = e.run(feed_x(reference, 0), std::vector<Output>{reference.out, read_of(reference)});
    CHECK(got[0].to_floats() == want[0].to_floats());
    CHECK(got[1].to_floats() == want[1].to_floats());
  }
  CHECK(log.has("runs eagerly: node first/ReadVariable (ReadVariable) lends a buffer"));
}

TEST_CASE("two devices whose segments would need each other run without segments") {
  // a1 on sim:0 feeds b1 on sim:1, and b2 on sim:1 feeds a2 on sim:0: one level each, no order between them.
  auto g = std::make_shared<Graph>();
  const Output x = g->placeholder("x", DType::kF32, Shape{-1, 4});
  const Output y = g->placeholder("y", DType::kF32, Shape{-1, 4});
  auto on = [&](const char* name, const char* device, std::vector<Output> in) {
    Graph::Scope scope(*g, name, device, Phase::kForward);
    return g->add(in.size() == 1 ? "Relu" : "AddN", std::move(in));
  };
  const Output a1 = on("a1", "sim:0", {x}), b2 = on("b2", "sim:1", {y});
  const Output a2 = on("a2", "sim:0", {a1, b2}), b1 = on("b1", "sim:1", {b2, a1});
  const TensorSpec fed[] = {{DType::kF32, Shape{2, 4}}, {DType::kF32, Shape{2, 4}}};
  const std::vector<Output> feeds{x, y}, fetches{a2, b1};
  Plan plan = build_plan(*g, feeds, fed, fetches, {}, {});
  plan_device_graphs(plan);
  CHECK(plan.graph_segments.empty());
  ThreadPool inter(1), intra(1);
  SessionOptions so;
  so.device_graphs = true;
  Session s(g, inter, intra, so);
  const std::vector<Feed> values{{x, Tensor::filled(Shape{2, 4}, 1.0f)}, {y, Tensor::filled(Shape{2, 4}, 2.0f)}};
  for (int i = 0; i < 3; ++i) CHECK(s.run(values, fetches)[1].to_floats() == std::vector<float>(8, 3.0f));
}

TEST_CASE("an assignment on sim, done on the host at once, refuses its segment; results hold") {
  auto g = std::make_shared<Graph>();
  auto v = std::make_shared<Variable>("v", Tensor::zeros(DType::kF32, Shape{2, 4}));
  const Output x = g->placeholder("x", DType::kF32, Shape{-1, 4});
  Output assign;
  {
    Graph::Scope scope(*g, "a", "sim:1", Phase::kForward);
    assign = g->add("AssignVariable", {g->add("Relu", {x})}, {}, {VarUse{v, true}});
  }
  ThreadPool inter(1), intra(1);
  Logged log;
  Session s(g, inter, intra, log.options(true));
  for (int step = 0; step < 4; ++step) {
    s.run(std::vector<Feed>{{x, Tensor::filled(Shape{2, 4}, static_cast<float>(step + 1))}}, {},
          std::vector<Output>{assign});
    CHECK(v->read().to_floats() == std::vector<float>(8, static_cast<float>(step + 1)));
  }
  CHECK(log.has("runs eagerly: node a/AssignVariable (AssignVariable) runs on the host for every device"));
}

TEST_CASE("a snapshot variable read by a later segment refuses that segment too") {
  auto make = [](std::shared_ptr<Graph>& g, Output& x, std::shared_ptr<Variable>& w) {
    g = std::make_shared<Graph>();
    w = std::make_shared<Variable>("w", Tensor::filled(Shape{4, 4}, 0.5f), LockingMode::kSnapshot);
    x = g->placeholder("x", DType::kF32, Shape{-1, 4});
    Output r, first, between;
    {
      Graph::Scope scope(*g, "first", "sim:1", Phase::kForward);
      r = g->read(w);
      first = g->add("Relu", {g->add("MatMul", {x, r})});
    }
    {
      Graph::Scope scope(*g, "between", "cpu", Phase::kForward);
      between = g->add("Relu", {first});
    }
    Graph::Scope scope(*g, "last", "sim:1", Phase::kForward);
    return g->add("MatMul", {between, r});
  };
  std::shared_ptr<Graph> g, ge;
  std::shared_ptr<Variable> w, we;
  Output x, xe;
  const Output out = make(g, x, w), oute = make(ge, xe, we);
  ThreadPool inter(1), intra(1);
  SessionOptions so;
  so.device_graphs = true;
  Session s(g, inter, intra, so), e(ge, inter, intra);
  for (int step = 0; step < 6; ++step) {
    // A new version each time; the old one is freed once nobody holds it.
    w->assign(Tensor::filled(Shape{4, 4}, 0.1f * static_cast<float>(step)));
    we->assign(Tensor::filled(Shape{4, 4}, 0.1f * static_cast<float>(step)));
    CHECK(run_x(s, x, out, 0) == run_x(e, xe, oute, 0));
  }
  CHECK(s.device_graph_replays() == 0);
}

TEST_CASE("an all-reduce on sim refuses its segment: a replay would meet under a past step's key") {
  auto g = std::make_shared<Graph>();
  const std::shared_ptr<CollectiveGroup> group = CollectiveGroup::create(1);
  const Output x = g->placeholder("x", DType::kF32, Shape{2, 4});
  Output sum;
  {
    Graph::Scope scope(*g, "a", "sim:1", Phase::kForward);
    sum = g->add("AllReduce", {g->add("Relu", {x}), g->scalar(1.0f)},
                 Attrs{{"group", group->id()}, {"member", std::int64_t{0}}, {"instance", std::int64_t{0}}});
  }
  ThreadPool inter(1), intra(1);
  Logged log;
  Session s(g, inter, intra, log.options(true));
  for (int step = 0; step < 3; ++step) {
    const Tensor out = s.run(std::vector<Feed>{{x, Tensor::filled(Shape{2, 4}, static_cast<float>(step + 1))}},
                             std::vector<Output>{sum})[0];
    CHECK(out.to(cpu_device()).to_floats() == std::vector<float>(8, static_cast<float>(step + 1)));
  }
  CHECK(log.has("runs eagerly: node a/AllReduce (AllReduce) meets other replicas by its step"));
}

TEST_CASE("a replayed dropout draws the run's step, and a new batch offset records again") {
  // x -> MatMul -> Dropout on sim:1, one segment: a replay must draw each run's mask, whose key changes with
  // the step and whose elements start at the run's batch offset (a data-parallel replica's rows).
  const auto make = [] {
    auto g = std::make_shared<Graph>();
    const Output x = g->placeholder("x", DType::kF32, Shape{-1, 4});
    Graph::Scope scope(*g, "drop", "sim:1", Phase::kForward);
    const Output w = g->constant(Tensor::filled(Shape{4, 8}, 0.5f));
    return std::pair{g, std::pair{x, g->add("Dropout", {g->add("MatMul", {x, w})}, Attrs{{"rate", 0.5}})}};
  };
  const auto [eager_graph, eager_io] = make();
  const auto [graph, io] = make();
  ThreadPool inter(1), intra(1);
  Logged log;
  Session eager(eager_graph, inter, intra), graphs(graph, inter, intra, log.options(true));
  for (int step = 0; step < 8; ++step) {
    CAPTURE(step);
    RunOptions ro;
    ro.step = step;
    ro.batch_offset = step < 5 ? 0 : 2;
    const std::vector<Tensor> want =
        eager.run(feed_x_to(eager_io.first, 0), std::vector<Output>{eager_io.second}, {}, ro);
    const std::vector<Tensor> got = graphs.run(feed_x_to(io.first, 0), std::vector<Output>{io.second}, {}, ro);
    CHECK(got[0].to_floats() == want[0].to_floats());
  }
  CHECK(graphs.device_graph_replays() >= 5);
  CHECK(log.has("recorded again: the run's batch offset moved"));
}
