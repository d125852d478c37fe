// The op registry. An op is defined once (name, inputs, shape function, gradient); kernels are registered
// apart from it, one per (op, device kind), so a backend adds kernels without touching any op's definition.
//
// core defines its ops in core/ops/, and the registry adds them itself before its first lookup or kernel
// registration. Kernels, and ops defined outside core (a test's own), register from static registrars
// (TCTL_REGISTER_KERNEL, TCTL_REGISTER_OP) in any order; the registry is filled before main() and read-only
// afterwards, so lookups need no lock.
#pragma once

#include <array>
#include <functional>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/attrs.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"

namespace tctl {

class GradBuilder;
class KernelContext;
struct Output;

// The dtype and shape of a value; the shape may hold unknown (-1) dimensions while a graph is traced.
struct TensorSpec {
  DType dtype = DType::kF32;
  Shape shape;
};

// What a shape function sees: the specs of the inputs and the node's attributes.
class InferContext {
 public:
  InferContext(std::span<const TensorSpec> inputs, const Attrs& attrs, std::string_view node_name)
      : inputs_(inputs), attrs_(attrs), node_name_(node_name) {}
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  const TensorSpec& input(int i) const { return inputs_[i]; }
  const Shape& shape(int i) const { return inputs_[i].shape; }
  const Attrs& attrs() const { return attrs_; }
  // Throws ShapeError "<node>: <message>".
  [[noreturn]] void fail(const std::string& message) const;
  // Fails unless input i has the given rank / dtype.
  void expect_rank(int i, int rank) const;
  void expect_dtype(int i, DType dtype) const;

 private:
  std::span<const TensorSpec> inputs_;
  const Attrs& attrs_;
  std::string_view node_name_;
};

using InferFn = std::function<TensorSpec(const InferContext&)>;
// Returns one gradient per input of the op (an invalid Output where the input gets none).
using GradFn = std::function<std::vector<Output>(GradBuilder&)>;
using KernelFn = void (*)(KernelContext&);
// What one node of an op costs, from its input specs, its output spec and its attributes: multiply-adds for
// products, else one unit per element read or written. The executor hands a ready node to another inter-op
// thread only when it costs enough to pay for the trip (core/executor.cpp).
using CostFn = std::function<std::int64_t(std::span<const TensorSpec> inputs, const TensorSpec& output, const Attrs&)>;
// The cost of an op whose time does not follow from its shapes: it sleeps, or waits for other nodes.
inline constexpr std::int64_t kUnknownCost = std::numeric_limits<std::int64_t>::max();

struct OpDef {
  std::string name;
  // Number of data inputs; -1 for a variadic op.
  int num_inputs = 1;
  InferFn infer;
  GradFn grad;  // empty: not differentiable
  // The output shares its buffer with state it does not own (a variable read, a feed); the executor drops
  // it as soon as its last consumer has run, so a later in-place update need not copy.
  bool aliases_output = false;
  // Null means kUnknownCost, except for core's own ops, which default to elements_cost; an op that blocks
  // (Delay, AllReduce) says unknown_cost.
  CostFn cost;
  // Floating-point operations as TensorFlow's profiler counts them, for `tensorctl profile`: a product's
  // multiply and add are two, a pooling window one per element it covers. Null: not counted (0), as for the
  // memory-bound ops (elementwise, losses, updates).
  CostFn flops;
  // The node waits for other replicas (an all-reduce); the profiler gives such nodes a trace track of their own.
  bool collective = false;
  // The kernel may declare its output dead (KernelContext::skip): every node that reads a dead value, directly
  // or through other nodes, is then skipped and its own output dead, as TensorFlow's dead tensors behind a
  // Switch. Dynamic loss scaling skips a step's updates this way when a gradient overflowed (core/ops/loss_scale.cpp).
  bool may_skip = false;
  // The op's arithmetic is products (a matrix product, a convolution, attention's): under a
  // reduced compute type (core/compute_type.h, KernelContext::compute_type) its kernels may read the operands
  // in that type, accumulating in float32. Every other op computes in float32 whatever the run's type.
  bool products = false;

  // The kernel for a device kind, or null when that kind has none. Filled by register_kernel.
  KernelFn kernel(DeviceKind kind) const {
    return kernels[kind.slot()] != nullptr ? kernels[kind.slot()] : every_device_kernel;
  }
  std::array<KernelFn, kMaxDeviceKinds> kernels{};
  // The kernel of every device kind that registers none of its own, backends not yet registered included:
  // the state ops', which hand over buffers and do no arithmetic.
  KernelFn every_device_kernel = nullptr;
};

// Adds an op; a duplicate name is an internal error. Returns true so it can initialise a static.
bool register_op(OpDef def);
// Adds the kernel of `op` for one device kind; a second kernel for the same pair is an internal error. The
// op may be defined before or after (registrars run in any order); a kernel whose op is never defined is
// reported by check_op_registry.
bool register_kernel(std::string_view op, DeviceKind kind, KernelFn fn);
// A backend file's kernels for one device kind, as one table: register_kernel for each entry.
struct KernelEntry {
  std::string_view op;
  KernelFn fn;
};
bool register_kernels(DeviceKind kind, std::initializer_list<KernelEntry> kernels);
// The op with this name; an unknown name is an internal error (ops are named by code, not by users).
const OpDef& op_def(std::string_view name);
// Internal error unless every registered kernel belongs to a defined op. Called once by tests and main.
void check_op_registry();
// The names of every defined op, sorted.
std::vector<std::string> op_names();

// Costs used by many ops: the elements of the inputs and the output; nothing (an op that hands over a
// buffer it holds); kUnknownCost.
std::int64_t elements_cost(std::span<const TensorSpec> inputs, const TensorSpec& output, const Attrs&);
std::int64_t free_cost(std::span<const TensorSpec> inputs, const TensorSpec& output, const Attrs&);
std::int64_t unknown_cost(std::span<const TensorSpec> inputs, const TensorSpec& output, const Attrs&);
// a * b, or kUnknownCost when either is unknown (negative, or kUnknownCost) or the product overflows.
std::int64_t cost_product(std::int64_t a, std::int64_t b);
// A shape's elements, or kUnknownCost when a dimension is unknown or the count overflows.
std::int64_t cost_elements(const Shape& shape);

// Shape functions used by many ops.
InferFn same_as_input(int i);
// Inputs 0..n-1 must all have input 0's dtype and shape; the output has them too.
InferFn same_shape_inputs();

}  // namespace tctl

#define TCTL_CONCAT_INNER(a, b) a##b
#define TCTL_CONCAT(a, b) TCTL_CONCAT_INNER(a, b)
// TCTL_REGISTER_OP({.name = "TestMeet", .num_inputs = 0, .infer = scalar_spec}); for an op defined outside
// core (a test's own), with its kernels registered apart.
#define TCTL_REGISTER_OP(...)                                                        \
  [[maybe_unused]] static const bool TCTL_CONCAT(tctl_registered_op_, __COUNTER__) = \
      ::tctl::register_op(::tctl::OpDef __VA_ARGS__)
// TCTL_REGISTER_KERNEL("Relu", "cpu", relu_cpu); the second argument names the backend (core/device.h
// device_kind).
#define TCTL_REGISTER_KERNEL(op, backend, fn)                                            \
  [[maybe_unused]] static const bool TCTL_CONCAT(tctl_registered_kernel_, __COUNTER__) = \
      ::tctl::register_kernel(op, ::tctl::device_kind(backend), fn)
// TCTL_REGISTER_KERNELS("cpu", {"Relu", relu_cpu}, {"ReluGrad", relu_grad_cpu});
#define TCTL_REGISTER_KERNELS(backend, ...)                                               \
  [[maybe_unused]] static const bool TCTL_CONCAT(tctl_registered_kernels_, __COUNTER__) = \
      ::tctl::register_kernels(::tctl::device_kind(backend), {__VA_ARGS__})
