// CPU kernels of Dropout for training graphs: zeroes each element with probability `rate` and scales the
// rest by 1 / (1 - rate) (definitions in core/ops/dropout.cpp). The mask comes from a counter-based stream
// keyed by (seed, stream, step), so the gradient op replays the same mask and no thread count changes it.
#include <algorithm>

#include "core/ops/dropout.h"
#include "kernels/cpu/dropout_mask.h"
#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {
namespace {

void apply_mask(KernelContext& ctx, std::int64_t stream) {
  const float rate = static_cast<float>(ctx.attrs().f("rate"));
  const float keep_scale = 1.0f / (1.0f - rate);
  const std::uint64_t key = ctx.random_key(stream);
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output().mutable_data<float>();
  if (!dropout_per_sequence(ctx.attrs())) {
    const std::uint64_t first = ctx.first_element(ctx.input(0));
    ctx.parallel_for(ctx.output().num_elements(), kElementwiseGrain, [&](std::int64_t begin, std::int64_t end) {
      mask_block(x, y, begin, end, key, first, rate, keep_scale);
    });
    return;
  }
  // One mask row per sequence: element (n, t, r) draws (n, r) of the stream at every step t.
  const SequenceRows rows = sequence_rows(ctx.input(0).shape());
  const std::uint64_t first = static_cast<std::uint64_t>(ctx.batch_offset() * rows.width);
  ctx.parallel_for(rows.batch * rows.steps,
                   std::max<std::int64_t>(1, kElementwiseGrain / std::max<std::int64_t>(rows.width, 1)),
                   [&](std::int64_t begin, std::int64_t end) {
                     for (std::int64_t row = begin; row < end; ++row) {
                       const std::int64_t n = row / rows.steps;
                       mask_block(x + row * rows.width, y + row * rows.width, 0, rows.width, key,
                                  first + static_cast<std::uint64_t>(n * rows.width), rate, keep_scale);
                     }
                   });
}

void dropout_cpu(KernelContext& ctx) { apply_mask(ctx, dropout_stream(ctx.node())); }
void dropout_grad_cpu(KernelContext& ctx) { apply_mask(ctx, ctx.attrs().i("stream")); }

}  // namespace

TCTL_REGISTER_KERNELS("cpu", {"Dropout", dropout_cpu}, {"DropoutGrad", dropout_grad_cpu});

}  // namespace tctl::cpu
