// CPU kernels of Dropout for training graphs: zeroes each element with probability `rate` and scales the
// rest by 1 / (1 - rate) (definitions in core/ops/dropout.cpp). The mask comes from a counter-based stream
// keyed by (seed, stream, step), so the gradient op replays the same mask and no thread count changes it.
#include "core/ops/dropout.h"
#include "kernels/cpu/dropout_mask.h"
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
  ctx.parallel_for(ctx.output().num_elements(), kElementwiseGrain, [&](std::int64_t begin, std::int64_t end) {
    mask_block(x, y, begin, end, key, first, rate, keep_scale);
  });
}

void dropout_cpu(KernelContext& ctx) { apply_mask(ctx, dropout_stream(ctx.node())); }
void dropout_grad_cpu(KernelContext& ctx) { apply_mask(ctx, ctx.attrs().i("stream")); }

}  // namespace

TCTL_REGISTER_KERNELS("cpu", {"Dropout", dropout_cpu}, {"DropoutGrad", dropout_grad_cpu});

}  // namespace tctl::cpu
