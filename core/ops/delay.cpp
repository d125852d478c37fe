// Delay: a blocking op for profiles and executor tests. Its kernels sleep `ms` milliseconds (attr, a double)
// and then copy the input to the output. The gradient passes dy through unchanged and does not sleep: only
// the forward pass blocks.
#include "core/ops/ops.h"

#include "core/autodiff.h"

namespace tctl {
namespace {

TensorSpec delay_infer(const InferContext& c) {
  const double ms = c.attrs().f("ms");
  if (!(ms >= 0.0)) c.fail("ms must be non-negative, got " + std::to_string(ms));
  return c.input(0);
}

}  // namespace

void define_delay_ops() {
  register_op({.name = "Delay",
               .infer = delay_infer,
               .grad = [](GradBuilder& g) { return std::vector<Output>{g.dy()}; },
               .cost = unknown_cost});
}

}  // namespace tctl
