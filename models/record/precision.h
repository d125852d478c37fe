// Precision policies, Keras' dtype policy names: "float32" (the default), "mixed_bfloat16", "mixed_float16".
// Variables and optimizer state are float32 under every policy; mixed_float16 adds dynamic loss scaling
// (models/train/optimizer.h). Under a mixed policy the products (dense, convolution, attention: OpDef::products)
// read their operands in bfloat16 or float16 and sum in float32 on the devices that have such kernels (cuda,
// and sim, which rounds as a GPU does). The CPU computes mixed_bfloat16's dense products (MatMul, FusedMatMul) in
// bfloat16 where it has AVX-512 BF16 (cpu_bf16_products) and everything else in float32; elsewhere it computes
// every policy in float32, with float32's results (mixed_float16's loss scaling multiplies and divides by
// powers of two, which is exact in float32). The run says which in one line (precision_note).
#pragma once

#include <string>
#include <vector>

#include "core/compute_type.h"

namespace tctl {

const std::vector<std::string>& precision_names();

// The type a policy's products read their operands in: kF32 for "float32".
ComputeType precision_compute_type(const std::string& precision);

// The line a run prints for a policy on its device: on the CPU, that it computes in float32; elsewhere, what
// runs in the reduced type. Empty for "float32".
std::string precision_note(const std::string& precision, const std::string& device);

}  // namespace tctl
