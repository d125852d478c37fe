// The type a node's products read their operands in, under a precision policy (models/record/precision.h):
// float32, or bfloat16 / float16 for mixed_bfloat16 / mixed_float16. It is a property of a run (SessionOptions,
// EagerOptions), not of the graph: one traced model runs at any precision. The kernels of the product ops
// (OpDef::products) read it through KernelContext::compute_type; every other kernel computes in float32, so
// reductions, losses, normalizations and the optimizer's updates keep float32 under every policy, as Keras'
// mixed policies keep them. A backend without reduced-precision products runs them in float32 (the CPU; the
// run says so).
#pragma once

#include <cstdint>
#include <string_view>

namespace tctl {

enum class ComputeType : std::uint8_t { kF32, kBF16, kF16 };

// "float32", "bfloat16", "float16".
std::string_view compute_type_name(ComputeType t);

// `x` rounded to the nearest value of type `t` (ties to even), as a float: what a product that reads its
// operand in `t` sees. Beyond float16's range a value becomes an infinity, and NaN stays NaN. kF32: x itself.
float round_to(ComputeType t, float x);

}  // namespace tctl
