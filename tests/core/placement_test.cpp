// Placement across devices, on the simulated device sim:N (kernels/sim/sim_device.h), which every machine has.
#include <doctest/doctest.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "core/executor.h"
#include "core/kernel_context.h"
#include "core/ops/state.h"
#include "core/session.h"
#include "kernels/sim/sim_device.h"

using namespace tctl;

namespace {

Device* sim0() { return DeviceRegistry::instance().find("sim:0"); }
Device* sim1() { return DeviceRegistry::instance().find("sim:1"); }

// x [2, 4] -> MatMul with w on `hidden`, twice, summed by AddN there, Relu there; then BiasAdd on the CPU.
struct SmallNet {
  std::shared_ptr<Graph> g = std::make_shared<Graph>();
  std::shared_ptr<Variable> w;
  Output x, hidden, out;
  explicit SmallNet(const std::string& hidden_device) {
    std::vector<float> wv(12);
    for (std::size_t i = 0; i < wv.size(); ++i) wv[i] = 0.1f * static_cast<float>(i) - 0.5f;
    w = std::make_shared<Variable>("w", Tensor::from_floats(Shape{4, 3}, wv));
    x = g->placeholder("x", DType::kF32, Shape{-1, 4});
    {
      Graph::Scope scope(*g, "hidden", hidden_device, Phase::kForward);
      Output a = g->add("MatMul", {x, g->read(w)});
      Output b = g->add("MatMul", {x, g->read(w)});
      hidden = g->add("Relu", {g->add("AddN", {a, b})});
    }
    Graph::Scope scope(*g, "out", "cpu", Phase::kForward);
    out = g->add("BiasAdd", {hidden, g->constant(Tensor::from_floats(Shape{3}, std::vector<float>{1, 2, 3}))});
  }
  std::vector<Feed> feeds() const {
    return {{x, Tensor::from_floats(Shape{2, 4}, std::vector<float>{1, -2, 3, 0.5f, -1, 2, 0.25f, 4})}};
  }
};

int count_copies(const Plan& plan) {
  int n = 0;
  for (const PlanNode& pn : plan.nodes) n += pn.node->op == &ops::copy();
  return n;
}

const PlanNode* find_node(const Plan& plan, const std::string& name) {
  for (const PlanNode& pn : plan.nodes)
    if (pn.node->name == name) return &pn;
  return nullptr;
}

}  // namespace

TEST_CASE("an edge that crosses devices gets one copy per value and destination, and fetches come back to the host") {
  SmallNet net("sim:0");
  const TensorSpec fed{DType::kF32, Shape{2, 4}};
  const std::vector<Output> feeds{net.x}, fetches{net.hidden, net.out};
  const Plan plan = build_plan(*net.g, feeds, std::span(&fed, 1), fetches, {}, {});
  // x goes to sim:0 once for both MatMuls; the Relu comes back once for BiasAdd and the fetch.
  CHECK(count_copies(plan) == 2);
  REQUIRE(find_node(plan, "x/copy_to_sim:0") != nullptr);
  CHECK(find_node(plan, "x/copy_to_sim:0")->device == sim0());
  REQUIRE(find_node(plan, "hidden/Relu/copy_to_cpu") != nullptr);
  CHECK(find_node(plan, "hidden/MatMul")->device == sim0());
  CHECK(find_node(plan, "hidden/ReadVariable")->device == sim0());
  CHECK(find_node(plan, "out/BiasAdd")->device == cpu_device());
  CHECK(find_node(plan, "out/Const")->device == cpu_device());
  CHECK(plan.placement_warnings.empty());

  ThreadPool inter(2), intra(2);
  Session on_sim(net.g, inter, intra);
  const std::vector<Tensor> got = on_sim.run(net.feeds(), fetches);
  CHECK(got[0].device() == cpu_device());
  CHECK(got[1].device() == cpu_device());
  CHECK(net.w->device() == sim0());  // the variable moved to where its reads run

  SmallNet reference("cpu");
  Session on_cpu(reference.g, inter, intra);
  const std::vector<Tensor> want = on_cpu.run(reference.feeds(), std::vector<Output>{reference.hidden, reference.out});
  CHECK(got[0].to_floats() == want[0].to_floats());
  CHECK(got[1].to_floats() == want[1].to_floats());
}

TEST_CASE("a variable's reads and updates run on one device: the one its first user asked for") {
  auto g = std::make_shared<Graph>();
  auto w = std::make_shared<Variable>("w", Tensor::filled(Shape{3}, 1.0f));
  Output read, update;
  {
    Graph::Scope scope(*g, "layer", "sim:0", Phase::kForward);
    read = g->read(w);
  }
  {
    // The optimizer asks for the CPU; the update follows its variable.
    Graph::Scope scope(*g, "optimizer", "cpu", Phase::kUpdate);
    update = g->add("ApplySgd", {g->constant(Tensor::filled(Shape{3}, 2.0f)), g->scalar(0.5f)}, {}, {{w, true}});
  }
  g->add_control_input(update.node, read.node);
  const std::vector<Output> targets{update};
  const Plan plan = build_plan(*g, {}, {}, {}, targets, {});
  CHECK(find_node(plan, "optimizer/ApplySgd")->device == sim0());
  CHECK(count_copies(plan) == 2);  // the gradient and the rate, made on the host
  ThreadPool inter(1), intra(1);
  Session s(g, inter, intra);
  s.run({}, {}, targets);
  CHECK(w->device() == sim0());
  CHECK(w->read().to_floats() == std::vector<float>{0, 0, 0});
}

TEST_CASE(
    "a node whose op has no kernel on its device runs on the CPU with one warning, or is refused under strict "
    "placement") {
  auto g = std::make_shared<Graph>();
  Output x = g->placeholder("x", DType::kF32, Shape{2});
  Output y;
  {
    Graph::Scope scope(*g, "hidden", "sim:0", Phase::kForward);
    y = g->add("Relu", {g->add("Tanh", {x})});  // sim has Relu but no Tanh
  }
  const std::vector<Feed> feeds{{x, Tensor::from_floats(Shape{2}, std::vector<float>{-1, 1})}};
  const std::vector<Output> fetch{y};
  ThreadPool inter(1), intra(1);
  Session soft(g, inter, intra);
  const std::vector<float> got = soft.run(feeds, fetch)[0].to_floats();
  CHECK(got[0] == 0.0f);
  CHECK(got[1] == doctest::Approx(0.7615942f));
  REQUIRE(soft.placement_warnings().size() == 1);
  CHECK(soft.placement_warnings()[0] == "hidden/Tanh: op Tanh has no kernel for sim:0, running on cpu");

  SessionOptions strict;
  strict.placement.strict = true;
  Session refusing(g, inter, intra, strict);
  CHECK_THROWS_WITH_AS(refusing.run(feeds, fetch),
                       "cannot place hidden/Tanh: op Tanh has no kernel for sim:0 (--strict-placement)",
                       PlacementError);
}

TEST_CASE("the placement log names every node with its op and device, copies included, once per session") {
  SmallNet net("sim:0");
  std::vector<std::string> lines;
  SessionOptions options;
  options.placement.log = [&](const std::string& line) { lines.push_back(line); };
  ThreadPool inter(1), intra(1);
  Session s(net.g, inter, intra, options);
  const std::vector<Output> fetch{net.out};
  s.run(net.feeds(), fetch);
  const std::size_t first = lines.size();
  CHECK(std::find(lines.begin(), lines.end(), "x/copy_to_sim:0 (Copy): sim:0") != lines.end());
  CHECK(std::find(lines.begin(), lines.end(), "hidden/MatMul (MatMul): sim:0") != lines.end());
  CHECK(std::find(lines.begin(), lines.end(), "out/BiasAdd (BiasAdd): cpu") != lines.end());
  // Another batch size makes another plan of the same nodes: nothing new to report.
  s.run(std::vector<Feed>{{net.x, Tensor::filled(Shape{5, 4}, 1.0f)}}, fetch);
  CHECK(lines.size() == first);
}

namespace {
// A probe with a kernel on the CPU and on sim, recording the device of its kernel and of every input.
struct Seen {
  const Device* kernel;
  std::vector<const Device*> inputs;
};
std::mutex g_seen_mu;
std::vector<Seen> g_seen;

void probe(KernelContext& ctx) {
  Seen s{&ctx.device(), {}};
  for (int i = 0; i < ctx.num_inputs(); ++i) s.inputs.push_back(ctx.input(i).device());
  {
    std::lock_guard lock(g_seen_mu);
    g_seen.push_back(std::move(s));
  }
  ctx.output();  // allocated on the kernel's device, left unwritten
}
TensorSpec probe_spec(const InferContext&) { return {DType::kF32, Shape{2}}; }
TCTL_REGISTER_OP({.name = "TestDeviceProbe", .num_inputs = -1, .infer = probe_spec});
TCTL_REGISTER_KERNEL("TestDeviceProbe", "cpu", probe);
TCTL_REGISTER_KERNEL("TestDeviceProbe", "sim", probe);
}  // namespace

TEST_CASE("no kernel ever receives a buffer of another device") {
  auto g = std::make_shared<Graph>();
  Output x = g->placeholder("x", DType::kF32, Shape{2});
  std::vector<Output> made{x};
  // A chain hopping between three devices, each probe reading every value made before it.
  const char* devices[] = {"sim:0", "cpu", "sim:1", "sim:0", "sim:1", "cpu", "sim:0"};
  for (const char* d : devices) {
    Graph::Scope scope(*g, std::string("on_") + d, d, Phase::kForward);
    made.push_back(g->add("TestDeviceProbe", made));
  }
  {
    std::lock_guard lock(g_seen_mu);
    g_seen.clear();
  }
  ThreadPool inter(2), intra(1);
  Session s(g, inter, intra);
  const std::vector<Output> fetch{made.back()};
  const std::vector<Feed> feeds{{x, Tensor::filled(Shape{2}, 1.0f)}};
  s.run(feeds, fetch);
  s.run(feeds, fetch);
  // Fed on a device: the CPU's probes read x itself, so x comes to the host, and the others get copies.
  const std::vector<Feed> fed_on_sim{{x, Tensor::filled(Shape{2}, 1.0f).to(sim1())}};
  s.run(fed_on_sim, fetch);
  std::lock_guard lock(g_seen_mu);
  REQUIRE(g_seen.size() == 3 * std::size(devices));
  int inputs = 0;
  for (const Seen& seen : g_seen)
    for (const Device* in : seen.inputs) {
      CHECK(in == seen.kernel);
      ++inputs;
    }
  CHECK(inputs == 3 * (1 + 2 + 3 + 4 + 5 + 6 + 7));
}

TEST_CASE("a value fed on the device its only uses are copied to stays there, and gives the same results") {
  SmallNet net("sim:0");
  ThreadPool inter(1), intra(1);
  Session session(net.g, inter, intra);
  const std::vector<Output> fetches{net.hidden, net.out};
  const std::vector<Tensor> want = session.run(net.feeds(), fetches);
  std::vector<Feed> on_sim = net.feeds();
  on_sim[0].value = on_sim[0].value.to(sim0());
  // x's one use is its copy to sim:0, which now copies on sim:0: no trip through a buffer on the host, so
  // a steady-state run takes as many buffers as one fed on the host.
  auto buffers_of_second_run = [&](const std::vector<Feed>& feeds) {
    session.run(feeds, fetches);
    const std::uint64_t before = Buffer::allocation_count();
    session.run(feeds, fetches);
    return Buffer::allocation_count() - before;
  };
  const std::uint64_t fed_on_host = buffers_of_second_run(net.feeds());
  CHECK(buffers_of_second_run(on_sim) == fed_on_host);
  const std::vector<Tensor> got = session.run(on_sim, fetches);
  CHECK(got[0].device() == cpu_device());
  CHECK(got[0].to_floats() == want[0].to_floats());
  CHECK(got[1].to_floats() == want[1].to_floats());
  // Fetched itself, x comes to the host.
  const std::vector<Tensor> x_back = session.run(on_sim, std::vector<Output>{net.x, net.out});
  CHECK(x_back[0].device() == cpu_device());
  CHECK(x_back[0].to_floats() == net.feeds()[0].value.to_floats());
  CHECK(x_back[1].to_floats() == want[1].to_floats());
}

TEST_CASE("a sim kernel refuses an input that lives on another device") {
  Graph g;
  Output a = g.placeholder("a", DType::kF32, Shape{2, 2});
  Output b = g.placeholder("b", DType::kF32, Shape{2, 2});
  Output m = g.add("MatMul", {a, b});
  const Tensor on_cpu = Tensor::filled(Shape{2, 2}, 1.0f);
  const Tensor on_sim = on_cpu.to(sim0());
  const Tensor* inputs[] = {&on_sim, &on_cpu};
  Tensor out;
  ThreadPool intra(1);
  const TensorSpec spec{DType::kF32, Shape{2, 2}};
  KernelContext ctx(g.node(m), *sim0(), spec, inputs, out, intra, 0, 0);
  const KernelFn kernel = g.node(m).op->kernel(device_kind("sim"));
  REQUIRE(static_cast<bool>(kernel));
  CHECK_THROWS_WITH_AS(kernel(ctx), "sim:0 kernel of MatMul refuses input 1, which lives on cpu", RuntimeError);
  CHECK_FALSE(out.defined());
  const Tensor* both[] = {&on_sim, &on_sim};
  KernelContext good(g.node(m), *sim0(), spec, both, out, intra, 0, 0);
  kernel(good);
  CHECK(out.device() == sim0());
  CHECK(out.to_floats() == std::vector<float>{2, 2, 2, 2});
}

TEST_CASE("steady-state steps on a sim device take no new memory from the system") {
  SmallNet net("sim:1");
  ThreadPool inter(1), intra(1);
  Session s(net.g, inter, intra);
  const std::vector<Output> fetch{net.out};
  for (int i = 0; i < 3; ++i) s.run(net.feeds(), fetch);
  const std::uint64_t fresh = sim1()->memory_stats().fresh_blocks;
  for (int i = 0; i < 20; ++i) s.run(net.feeds(), fetch);
  CHECK(sim1()->memory_stats().fresh_blocks == fresh);
  CHECK(sim1()->memory_stats().reused_blocks > 0);
}
