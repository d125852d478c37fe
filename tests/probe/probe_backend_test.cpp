// A backend added from tests/ alone: `probe`, a device of host memory with kernels for a handful of ops. It
// registers itself as any backend does (core/device.h register_backend; kernels through the op registry), and
// nothing outside tests/ names it. A layer placed on probe:0 trains as on the CPU, bit for bit, with the copies
// and the placement log that sim:0 gets; a node the probe refuses through Device::supports runs on the CPU.
// Its own suite (probe_tests), so the device names every other suite spells out stay as they are.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "core/graph.h"
#include "core/kernel_context.h"
#include "models/data/dataset.h"
#include "models/train/model.h"
#include "models/train/trainer.h"

namespace tctl {
namespace {

std::atomic<int> g_probe_kernel_runs{0};

// Host memory it hands out itself, so its kernels can tell its buffers from anyone else's.
class ProbeDevice final : public Device {
 public:
  DeviceKind kind() const override { return device_kind("probe"); }
  const std::string& name() const override { return name_; }
  bool host_addressable() const override { return true; }
  void* allocate(std::size_t bytes) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    std::lock_guard lock(mu_);
    blocks_.insert(p);
    return p;
  }
  void deallocate(void* p, std::size_t) override {
    {
      std::lock_guard lock(mu_);
      blocks_.erase(p);
    }
    std::free(p);
  }
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override { copy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override { copy(dst, src, bytes); }
  void copy_on_device(void* dst, const void* src, std::size_t bytes) override { copy(dst, src, bytes); }
  void enqueue(std::function<void()> work) override { work(); }
  void synchronize() override {}
  std::shared_ptr<Event> record_event() override { return done_event(); }
  // The weight gradient's product (x transposed times dy) is left to the CPU: a capability narrower than
  // "has a kernel", as a real backend's may be for a shape or a dtype.
  bool supports(const Node& node) const override {
    return Device::supports(node) && !(node.op->name == "MatMul" && node.attrs.i_or("transpose_a", 0) != 0);
  }
  bool owns(const void* p) const {
    std::lock_guard lock(mu_);
    return blocks_.count(const_cast<void*>(p)) != 0;
  }

 private:
  static void copy(void* dst, const void* src, std::size_t bytes) {
    if (bytes != 0) std::memcpy(dst, src, bytes);
  }
  std::string name_ = "probe:0";
  mutable std::mutex mu_;
  std::set<void*> blocks_;
};

ProvidedDevices probe_devices() {
  ProvidedDevices out;
  out.devices.push_back(std::make_unique<ProbeDevice>());
  return out;
}
[[maybe_unused]] const bool registered =
    register_backend({.name = "probe", .provider = probe_devices, .graph_colour = "#f0d0f0"});

// Every probe kernel: refuse a buffer that is not the probe's, then do the CPU kernel's arithmetic.
void probe_kernel(KernelContext& ctx) {
  const auto& probe = static_cast<const ProbeDevice&>(ctx.device());
  for (int i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.input(i).defined() && ctx.input(i).device() != &ctx.device())
      throw RuntimeError(ctx.node().name + ": input " + std::to_string(i) + " is not on probe:0");
  for (const VarUse& use : ctx.node().vars)
    if (use.var->device() != &ctx.device()) throw RuntimeError(ctx.node().name + ": a variable not on probe:0");
  ctx.node().op->kernel(DeviceKind::cpu())(ctx);
  if (ctx.previous_output().defined() && !probe.owns(ctx.previous_output().raw_data()))
    throw RuntimeError(ctx.node().name + ": output left off probe:0");
  g_probe_kernel_runs.fetch_add(1);
}

TCTL_REGISTER_KERNELS("probe", {"MatMul", probe_kernel}, {"FusedMatMul", probe_kernel}, {"BiasAdd", probe_kernel},
                      {"BiasAddGrad", probe_kernel}, {"Relu", probe_kernel}, {"ReluGrad", probe_kernel},
                      {"ApplySgd", probe_kernel});

struct Trained {
  std::vector<std::string> log;
  std::vector<std::string> warnings;
  std::vector<std::vector<float>> weights;
  std::vector<std::string> weight_devices;
};

Trained train_iris(const std::string& first_layer_device) {
  const nlohmann::json spec = {
      {"input_shape", {4}},
      {"layers",
       {{{"type", "Dense"}, {"units", 8}, {"activation", "relu"}, {"device", first_layer_device}},
        {{"type", "Dense"}, {"units", 3}}}}};
  Trained t;
  ModelOptions o;
  o.optimizer.type = "sgd";
  o.optimizer.learning_rate = 0.05;
  o.inter_op_threads = 1;
  o.intra_op_threads = 1;
  o.placement.log = [&t](const std::string& line) { t.log.push_back(line); };
  Model m(std::make_shared<Sequential>(Sequential::from_json(spec, "probe.json", "", 7)), o);
  Trainer(m).fit(load_builtin("iris", 0, "", ""), nullptr, 3, 16);
  t.warnings = m.placement_warnings();
  for (const auto& v : m.net().variables()) {
    t.weights.push_back(v->read().to_floats());
    t.weight_devices.push_back(v->device()->name());
  }
  return t;
}

bool logged(const Trained& t, const std::string& line) {
  return std::find(t.log.begin(), t.log.end(), line) != t.log.end();
}

}  // namespace
}  // namespace tctl

TEST_CASE("a backend registered from tests/ is a device name like any other") {
  using namespace tctl;
  CHECK(is_device_name("probe"));
  CHECK(is_device_name("probe:3"));
  CHECK(device_spellings() == "cpu, cuda, cuda:N, probe, probe:N, sim or sim:N");
  Device* probe = DeviceRegistry::instance().find("probe");
  REQUIRE(probe != nullptr);
  CHECK(probe->name() == "probe:0");
  CHECK(probe->kind() == device_kind("probe"));
  CHECK(probe->kind().name() == "probe");
  CHECK(DeviceRegistry::instance().why_absent("probe:1") == "present: probe:0");
  CHECK(find_backend("probe:0")->graph_colour == "#f0d0f0");
}

TEST_CASE("a layer on probe:0 trains to the CPU's weights bit for bit, with its copies and placement logged") {
  using namespace tctl;
  const int runs_before = g_probe_kernel_runs.load();
  const Trained on_probe = train_iris("probe:0"), on_cpu = train_iris("cpu");
  CHECK(g_probe_kernel_runs.load() > runs_before);
  CHECK(on_probe.weights == on_cpu.weights);
  // The first layer's kernel and bias live where the layer asked; the second layer's on the CPU.
  CHECK(on_probe.weight_devices == std::vector<std::string>{"probe:0", "probe:0", "cpu", "cpu"});
  CHECK(logged(on_probe, "x/copy_to_probe:0 (Copy): probe:0"));
  CHECK(logged(on_probe, "optimizer/ApplySgd (ApplySgd): probe:0"));
  bool copied_back = false;
  for (const std::string& line : on_probe.log)
    copied_back |= line.find("/copy_to_cpu (Copy): cpu") != std::string::npos;
  CHECK(copied_back);
  // The one node the probe refuses by its attributes runs on the CPU, with a warning naming the reason.
  bool refused = false;
  for (const std::string& w : on_probe.warnings)
    refused |=
        w.find("probe:0 does not support this MatMul (its shapes or attributes), running on cpu") != std::string::npos;
  CHECK(refused);
  for (const std::string& line : on_probe.log) INFO(line);
}
