// Delay: a blocking op for profiles and executor tests. The forward kernel sleeps `ms` milliseconds (attr,
// a double) and then copies its input to its output. The gradient passes dy through unchanged and does not
// sleep: only the forward pass blocks.
#include <chrono>
#include <cstring>
#include <thread>

#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {
namespace {

TensorSpec delay_infer(const InferContext& c) {
  const double ms = c.attrs().f("ms");
  if (!(ms >= 0.0)) c.fail("ms must be non-negative, got " + std::to_string(ms));
  return c.input(0);
}

void delay_cpu(KernelContext& ctx) {
  const double ms = ctx.attrs().f("ms");
  if (ms > 0.0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output();
  if (x.bytes() > 0) std::memcpy(y.mutable_data<char>(), x.raw_data(), x.bytes());
}

}  // namespace

TCTL_REGISTER_OP({.name = "Delay",
                  .infer = delay_infer,
                  .grad = [](GradBuilder& g) { return std::vector<Output>{g.dy()}; },
                  .cpu = delay_cpu});

}  // namespace tctl::cpu
