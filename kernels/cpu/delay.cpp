// The CPU kernel of Delay, a blocking op for profiles and executor tests: sleeps `ms` milliseconds (attr, a
// double), then copies its input to its output (definition in core/ops/delay.cpp).
#include <chrono>
#include <cstring>
#include <thread>

#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {
namespace {

void delay_cpu(KernelContext& ctx) {
  const double ms = ctx.attrs().f("ms");
  if (ms > 0.0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output();
  if (x.bytes() > 0) std::memcpy(y.mutable_data<char>(), x.raw_data(), x.bytes());
}

}  // namespace

TCTL_REGISTER_KERNELS("cpu", {"Delay", delay_cpu});

}  // namespace tctl::cpu
