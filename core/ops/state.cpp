#include "core/ops/state.h"

#include <array>

#include "core/errors.h"
#include "core/graph.h"
#include "core/kernel_context.h"

namespace tctl::ops {
namespace {

TensorSpec spec_from_attrs(const InferContext& c) {
  const auto& dims = c.attrs().ints("shape");
  return {static_cast<DType>(c.attrs().i("dtype")), Shape(std::span<const std::int64_t>(dims))};
}

void placeholder_kernel(KernelContext& ctx) { throw RuntimeError("placeholder " + ctx.node().name + " must be fed"); }

// A Const node's value is made on the host; placement keeps the node there and copies it where it is used.
void const_kernel(KernelContext& ctx) { ctx.set_output(ctx.node().value); }

// A read its plan never writes keeps the last run's value while the variable has had no write since: no
// lock, no new handle (the inference pass of a model reads every weight on every call).
void read_variable_kernel(KernelContext& ctx) {
  const Variable& v = ctx.var(0);
  std::uint64_t* kept = ctx.kept_read();
  if (kept == nullptr || v.lock_free()) {
    ctx.set_output(v.read());
    return;
  }
  if (v.holds_current(ctx.previous_output(), *kept)) return;
  ctx.set_output(v.read(*kept));
}

// Stores its input into the variable through the variable's locking mode.
void assign_variable_kernel(KernelContext& ctx) { ctx.var(0).assign(ctx.input(0)); }

TensorSpec assign_infer(const InferContext&) { return {DType::kF32, Shape{}}; }

// The input, from whichever device holds it, into a buffer on the node's device.
void copy_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  Tensor& out = ctx.output();
  copy_between(*in.device(), in.raw_data(), ctx.device(), out.raw_mutable_data(), in.bytes());
}

// The definitions, looked up once: code compares a node's op with them by address.
enum StateOp { kPlaceholder, kConst, kReadVariable, kAssignVariable, kCopy };
const OpDef& state_op(StateOp which) {
  static const std::array<const OpDef*, 5> defs{&op_def("Placeholder"), &op_def("Const"), &op_def("ReadVariable"),
                                                &op_def("AssignVariable"), &op_def("Copy")};
  return *defs[which];
}

}  // namespace

const OpDef& placeholder() { return state_op(kPlaceholder); }
const OpDef& constant() { return state_op(kConst); }
const OpDef& read_variable() { return state_op(kReadVariable); }
const OpDef& assign_variable() { return state_op(kAssignVariable); }
const OpDef& copy() { return state_op(kCopy); }

void define_state_ops() {
  // A feed, a constant and a variable read hand over a buffer that exists already.
  register_op({.name = "Placeholder",
               .num_inputs = 0,
               .infer = spec_from_attrs,
               .cost = free_cost,
               .every_device_kernel = placeholder_kernel});
  register_op({.name = "Const",
               .num_inputs = 0,
               .infer = spec_from_attrs,
               .aliases_output = true,
               .cost = free_cost,
               .every_device_kernel = const_kernel});
  register_op({.name = "AssignVariable", .infer = assign_infer, .every_device_kernel = assign_variable_kernel});
  register_op({.name = "ReadVariable",
               .num_inputs = 0,
               .infer = spec_from_attrs,
               .aliases_output = true,
               .cost = free_cost,
               .every_device_kernel = read_variable_kernel});
  register_op({.name = "Copy", .infer = same_as_input(0), .every_device_kernel = copy_kernel});
}

}  // namespace tctl::ops
