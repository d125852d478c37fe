// Ops that bring values into a graph: placeholders (fed), constants and variable reads.
#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {
namespace {

TensorSpec spec_from_attrs(const InferContext& c) {
  const auto& dims = c.attrs().ints("shape");
  return {static_cast<DType>(c.attrs().i("dtype")), Shape(std::span<const std::int64_t>(dims))};
}

void placeholder_cpu(KernelContext& ctx) {
  throw RuntimeError("placeholder " + ctx.node().name + " must be fed");
}

void const_cpu(KernelContext& ctx) { ctx.set_output(ctx.node().value); }

// A read its plan never writes keeps the last run's value while the variable has had no write since: no
// lock, no new handle (the inference pass of a model reads every weight on every call).
void read_variable_cpu(KernelContext& ctx) {
  const Variable& v = ctx.var(0);
  std::uint64_t* kept = ctx.kept_read();
  if (kept == nullptr || v.lock_free()) {
    ctx.set_output(v.read());
    return;
  }
  if (ctx.previous_output().defined() && v.writes() == *kept) return;
  ctx.set_output(v.read(*kept));
}

// Stores its input into the variable through the variable's locking mode.
void assign_variable_cpu(KernelContext& ctx) { ctx.var(0).assign(ctx.input(0)); }

TensorSpec assign_infer(const InferContext& c) { return {DType::kF32, Shape{}}; }

}  // namespace

TCTL_REGISTER_OP({.name = "Placeholder", .num_inputs = 0, .infer = spec_from_attrs});
TCTL_REGISTER_OP({.name = "Const", .num_inputs = 0, .infer = spec_from_attrs, .aliases_output = true});
TCTL_REGISTER_OP({.name = "AssignVariable", .infer = assign_infer});
TCTL_REGISTER_OP({.name = "ReadVariable", .num_inputs = 0, .infer = spec_from_attrs, .aliases_output = true});

TCTL_REGISTER_KERNEL("Placeholder", DeviceKind::kCpu, placeholder_cpu);
TCTL_REGISTER_KERNEL("Const", DeviceKind::kCpu, const_cpu);
TCTL_REGISTER_KERNEL("AssignVariable", DeviceKind::kCpu, assign_variable_cpu);
TCTL_REGISTER_KERNEL("ReadVariable", DeviceKind::kCpu, read_variable_cpu);

}  // namespace tctl::cpu
