// The type a node's products read their operands in, under a precision policy (models/record/precision.h):
// float32, or bfloat16 / float16 for mixed_bfloat16 / mixed_float16. It is a property of a run (SessionOptions,
// EagerOptions), not of the graph: one traced model runs at any precision. The kernels of the product ops
// (OpDef::products) read it through KernelContext::compute_type; every other kernel computes in float32, so
// reductions, losses, normalizations and the optimizer's updates keep float32 under every policy, as Keras'
// mixed policies keep them. A backend without reduced-precision products runs them in float32 (the CPU; the
// run says so).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tctl {

enum class ComputeType : std::uint8_t { kF32, kBF16, kF16 };

// "float32", "bfloat16", "float16".
std::string_view compute_type_name(ComputeType t);

// `x` rounded to the nearest value of type `t` (ties to even), as a float: what a product that reads its
// operand in `t` sees. Beyond float16's range a value becomes an infinity, and NaN stays NaN. kF32: x itself.
float round_to(ComputeType t, float x);

// Whether the CPU's products run mixed_bfloat16 in bfloat16: on a processor with AVX-512 BF16
// (kernels/cpu/bf16_product.h), unless TCTL_CPU_BF16=0 in the environment (bench_workloads compares the two
// at one policy) or the build chooses as without AVX-512 (TENSORCTL_AS_AVX2). Elsewhere the CPU computes every
// policy in float32.
bool cpu_bf16_products();
// Why cpu_bf16_products() is false here ("TCTL_CPU_BF16=0", "an AVX2 build", "needs AVX-512 BF16"), or "".
const std::string& cpu_bf16_absence();

}  // namespace tctl
