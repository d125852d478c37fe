#include "core/eager.h"

#include <cmath>

#include "core/executor.h"
#include "core/kernel_context.h"
#include "core/ops/state.h"
#include "core/profiler.h"

namespace tctl {

namespace {

// 0 when every element is finite, else 1 for a NaN first, 2 for an infinity first.
int first_non_finite(const Tensor& value) {
  if (!value.defined() || value.dtype() != DType::kF32) return 0;
  const Tensor t = value.to(cpu_device());
  const float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.num_elements(); ++i)
    if (!std::isfinite(p[i])) return std::isnan(p[i]) ? 1 : 2;
  return 0;
}

}  // namespace

NonFiniteValue::NonFiniteValue(const Node& node, bool nan)
    : RuntimeError("the first " + std::string(nan ? "NaN" : "infinity") + " came from op " + node.name + " (" +
                   node.op->name + ", " + (node.phase == Phase::kForward ? "forward" : "backward") + " pass" +
                   (node.layer.empty() ? "" : ", layer " + node.layer) + ")"),
      op_name(node.name) {}

EagerRunner::EagerRunner(Graph& g, ThreadPool& intra, EagerOptions options) : g_(g), intra_(intra), options_(options) {
  g_.set_node_hook([this](const Node& node) { run(node); });
}

EagerRunner::~EagerRunner() { g_.set_node_hook({}); }

void EagerRunner::note_skip(const KernelContext& kc, std::size_t id) {
  if (!kc.skipped()) return;
  dead_[id] = 1;
  values_[id].reset();
}

void EagerRunner::run(const Node& node) {
  const std::size_t id = static_cast<std::size_t>(node.id);
  if (values_.size() <= id) {
    values_.resize(id + 1);
    dead_.resize(id + 1, 0);
  }
  if (node.op == &ops::placeholder()) {
    auto it = feeds_.find(node.name);
    if (it == feeds_.end()) throw RuntimeError("placeholder " + node.name + " must be fed");
    check_fed_spec(node, {it->second.dtype(), it->second.shape()});
    values_[id] = it->second;
    return;
  }
  for (const int in : node.inputs)
    if (dead_[static_cast<std::size_t>(in)] != 0) {
      dead_[id] = 1;
      return;
    }
  // Where the op runs: its device when that supports it, else the CPU (no warning here: the traced
  // graph's placement reports it). Inputs from another device are copied over first.
  Device* device = DeviceRegistry::instance().find(node.device);
  if (device == nullptr || !device->supports(node)) device = cpu_device();
  for (const VarUse& use : node.vars) use.var->place_on(device);
  // The node's spec may have an unknown batch dimension; the kernel gets the concrete one.
  std::vector<TensorSpec> in_specs;
  std::vector<Tensor> moved(node.inputs.size());
  std::vector<const Tensor*> inputs;
  in_specs.reserve(node.inputs.size());
  inputs.reserve(node.inputs.size());
  for (std::size_t k = 0; k < node.inputs.size(); ++k) {
    const Tensor* t = &values_[static_cast<std::size_t>(node.inputs[k])];
    if (t->device() != device) t = &(moved[k] = t->to(device));
    in_specs.push_back({t->dtype(), t->shape()});
    inputs.push_back(t);
  }
  if (options_.find_non_finite && node.phase == Phase::kUpdate) return;
  const TensorSpec spec = node.op->infer(InferContext(in_specs, node.attrs, node.name));
  const KernelFn kernel = node.op->kernel(device->kind());
  KernelContext kc(node, *device, spec, inputs.data(), values_[id], intra_, options_.seed, options_.step);
  kc.set_compute_type(options_.compute_type);
  if (options_.profiler == nullptr) {
    kernel(kc);
    note_skip(kc, id);
    if (options_.find_non_finite) {
      if (int kind = first_non_finite(values_[id])) throw NonFiniteValue(node, kind == 1);
    }
    return;
  }
  const auto start = Profiler::Clock::now();
  kernel(kc);
  note_skip(kc, id);
  options_.profiler->record(node, start, Profiler::Clock::now());
  // The node lives in a vector that grows as ops are added: copy its names before it can move.
  options_.profiler->collect();
}

}  // namespace tctl
