// Precision policies, Keras' dtype policy names: "float32" (the default), "mixed_bfloat16", "mixed_float16".
// Variables and optimizer state are float32 under every policy; mixed_float16 adds dynamic loss scaling
// (models/train/optimizer.h). No backend has reduced-precision kernels yet: every policy computes in
// float32 on every device, which the run says in one line (precision_note), and the results are float32's
// (mixed_float16's loss scaling multiplies and divides by powers of two, which is exact in float32).
#pragma once

#include <string>
#include <vector>

namespace tctl {

const std::vector<std::string>& precision_names();

// The line a run prints for a policy its device computes in float32; empty for "float32".
std::string precision_note(const std::string& precision, const std::string& device);

}  // namespace tctl
