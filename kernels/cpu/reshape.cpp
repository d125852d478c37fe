// The CPU kernel of Reshape: the same elements seen with another shape (definition in core/ops/reshape.cpp).
#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {
namespace {

// Shares the input's buffer: a tensor never changes, so no copy is needed.
void reshape_cpu(KernelContext& ctx) { ctx.set_output(ctx.input(0).reshaped(ctx.output_spec().shape)); }

}  // namespace

TCTL_REGISTER_KERNELS("cpu", {"Reshape", reshape_cpu});

}  // namespace tctl::cpu
