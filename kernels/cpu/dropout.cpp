// CPU kernels of Dropout for training graphs: zeroes each element with probability `rate` and scales the
// rest by 1 / (1 - rate) (definitions in core/ops/dropout.cpp). The mask comes from a counter-based stream
// keyed by (seed, stream, step), so the gradient op replays the same mask and no thread count changes it.
#include "core/ops/dropout.h"
#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {
namespace {

void apply_mask(KernelContext& ctx, std::int64_t stream) {
  const float rate = static_cast<float>(ctx.attrs().f("rate"));
  const float keep_scale = 1.0f / (1.0f - rate);
  const std::uint64_t key = ctx.random_key(stream);
  const std::uint64_t first = ctx.first_element(ctx.input(0));
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output().mutable_data<float>();
  for_each_element(ctx, ctx.output().num_elements(), [&](std::int64_t i) {
    y[i] = uniform_at(key, first + static_cast<std::uint64_t>(i)) < rate ? 0.0f : x[i] * keep_scale;
  });
}

void dropout_cpu(KernelContext& ctx) { apply_mask(ctx, dropout_stream(ctx.node())); }
void dropout_grad_cpu(KernelContext& ctx) { apply_mask(ctx, ctx.attrs().i("stream")); }

}  // namespace

TCTL_REGISTER_KERNELS(DeviceKind::kCpu, {"Dropout", dropout_cpu}, {"DropoutGrad", dropout_grad_cpu});

}  // namespace tctl::cpu
