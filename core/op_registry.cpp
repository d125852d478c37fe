#include "core/op_registry.h"

#include <algorithm>
#include <map>
#include <memory>

#include <atomic>
#include <mutex>

#include "core/errors.h"
#include "core/ops/ops.h"
#include "core/ops/state.h"

namespace tctl {

namespace {
// An op's entry exists once either its definition or one of its kernels has registered.
struct Entry {
  OpDef def;
  bool defined = false;
};

// Function-local so registrars in other translation units may run in any order.
std::map<std::string, std::unique_ptr<Entry>, std::less<>>& registry() {
  static std::map<std::string, std::unique_ptr<Entry>, std::less<>> ops;
  return ops;
}

// core's own ops are defined by explicit calls, not static registrars (which a static library's linker may
// drop), before the first lookup or registration. A definition registering further ops re-enters on the
// same thread and returns at once.
void define_core_ops() {
  static std::atomic<bool> done{false};
  if (done.load(std::memory_order_acquire)) return;
  static std::recursive_mutex mu;
  std::lock_guard lock(mu);
  static bool started = false;
  if (started) return;
  started = true;
  ops::define_state_ops();
  define_activations_ops();
  define_attention_ops();
  define_batch_norm_ops();
  define_collective_ops();
  define_concat_ops();
  define_conv_ops();
  define_delay_ops();
  define_dropout_ops();
  define_elementwise_ops();
  define_losses_ops();
  define_loss_scale_ops();
  define_matmul_ops();
  define_optimizers_ops();
  define_pooling_ops();
  define_reduce_ops();
  define_recurrent_ops();
  define_reshape_ops();
  define_sequence_ops();
  // core's ops do work that follows from their shapes, unless they say otherwise.
  for (auto& [name, e] : registry())
    if (e->defined && !e->def.cost) e->def.cost = elements_cost;
  done.store(true, std::memory_order_release);
}

Entry& entry(std::string_view name) {
  define_core_ops();
  auto& ops = registry();
  auto it = ops.find(name);
  if (it == ops.end()) it = ops.emplace(std::string(name), std::make_unique<Entry>()).first;
  return *it->second;
}
}  // namespace

void InferContext::fail(const std::string& message) const {
  throw ShapeError(std::string(node_name_) + ": " + message);
}

void InferContext::expect_rank(int i, int rank) const {
  if (shape(i).rank() != rank)
    fail("input " + std::to_string(i) + " must have rank " + std::to_string(rank) + ", got shape " +
         shape(i).to_string());
}

void InferContext::expect_dtype(int i, DType dtype) const {
  if (input(i).dtype != dtype)
    fail("input " + std::to_string(i) + " must be " + std::string(dtype_name(dtype)) + ", got " +
         std::string(dtype_name(input(i).dtype)));
}

bool register_op(OpDef def) {
  Entry& e = entry(def.name);
  TCTL_CHECK(!e.defined, "op registered twice: " + def.name);
  TCTL_CHECK(static_cast<bool>(def.infer), "op without a shape function: " + def.name);
  def.kernels = e.def.kernels;
  e.def = std::move(def);
  e.defined = true;
  return true;
}

bool register_kernel(std::string_view op, DeviceKind kind, KernelFn fn) {
  Entry& e = entry(op);
  KernelFn& slot = e.def.kernels[kind.slot()];
  TCTL_CHECK(slot == nullptr, "two " + std::string(kind.name()) + " kernels for op " + std::string(op));
  TCTL_CHECK(fn != nullptr, "a null kernel for op " + std::string(op));
  slot = fn;
  return true;
}

bool register_kernels(DeviceKind kind, std::initializer_list<KernelEntry> kernels) {
  for (const KernelEntry& k : kernels) register_kernel(k.op, kind, k.fn);
  return true;
}

const OpDef& op_def(std::string_view name) {
  define_core_ops();
  auto& ops = registry();
  auto it = ops.find(name);
  TCTL_CHECK(it != ops.end() && it->second->defined, "unknown op " + std::string(name));
  return it->second->def;
}

void check_op_registry() {
  define_core_ops();
  for (const auto& [name, e] : registry())
    TCTL_CHECK(e->defined, "a kernel is registered for op " + name + ", which is never defined");
}

std::vector<std::string> op_names() {
  define_core_ops();
  std::vector<std::string> out;
  for (const auto& [name, e] : registry())
    if (e->defined) out.push_back(name);
  return out;
}

std::int64_t cost_product(std::int64_t a, std::int64_t b) {
  std::int64_t product = 0;
  if (a < 0 || b < 0 || a == kUnknownCost || b == kUnknownCost || __builtin_mul_overflow(a, b, &product))
    return kUnknownCost;
  return product;
}

std::int64_t cost_elements(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape.dims()) n = cost_product(n, d);
  return n;
}

std::int64_t elements_cost(std::span<const TensorSpec> inputs, const TensorSpec& output, const Attrs&) {
  std::int64_t total = cost_elements(output.shape);
  for (const TensorSpec& in : inputs) {
    const std::int64_t n = cost_elements(in.shape);
    if (total == kUnknownCost || n == kUnknownCost || __builtin_add_overflow(total, n, &total)) return kUnknownCost;
  }
  return total;
}

std::int64_t free_cost(std::span<const TensorSpec>, const TensorSpec&, const Attrs&) { return 0; }

std::int64_t unknown_cost(std::span<const TensorSpec>, const TensorSpec&, const Attrs&) { return kUnknownCost; }

InferFn same_as_input(int i) {
  return [i](const InferContext& c) { return c.input(i); };
}

InferFn same_shape_inputs() {
  return [](const InferContext& c) {
    for (int i = 1; i < c.num_inputs(); ++i) {
      if (!c.shape(i).compatible(c.shape(0)) || c.input(i).dtype != c.input(0).dtype)
        c.fail("input " + std::to_string(i) + " has shape " + c.shape(i).to_string() + " but input 0 has " +
               c.shape(0).to_string());
    }
    return c.input(0);
  };
}

}  // namespace tctl
