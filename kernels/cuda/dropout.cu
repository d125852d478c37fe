// CUDA kernels of Dropout and DropoutGrad (definitions in core/ops/dropout.cpp, CPU kernels in
// kernels/cpu/dropout.cpp): the same mask as the CPU's, bit for bit, since element i's draw is
// uniform_at(key, first + i) of core/counter_random.h on both, with the key of (seed, stream, step) and the
// first element of the run's rows (KernelContext::first_element) made on the host.
// Kept elements are x / (1 - rate) as the CPU computes them: the same bits. Compiled, not yet run on a GPU
// with per_sequence (2026-11-29).
#include "core/op_registry.h"
#include "core/ops/dropout.h"
#include "kernels/cuda/device_math.cuh"

namespace tctl::cuda {
namespace {

// Element i draws element first + i of the stream, or with a mask per sequence (sequence_width > 0) the
// draw of its example and feature: (i / (steps width)) width + i % width.
struct Mask {
  const float* x;
  float* y;
  StepKey key;
  std::uint64_t first;
  float rate, keep_scale;
  std::int64_t sequence_width, sequence_length;
  __device__ void operator()(std::int64_t i) const {
    const std::int64_t draw =
        sequence_width > 0 ? i / (sequence_length * sequence_width) * sequence_width + i % sequence_width : i;
    y[i] = uniform_at(key.get(), first + static_cast<std::uint64_t>(draw)) < rate ? 0.0f : x[i] * keep_scale;
  }
};

// y = x masked with the draws of random stream `stream` in this step; x is input 0 (dy for the gradient).
void apply_mask(KernelContext& ctx, std::int64_t stream) {
  const float rate = static_cast<float>(ctx.attrs().f("rate"));
  Mask m{in<float>(ctx, 0),
         out<float>(ctx),
         step_random_key(ctx, stream),
         ctx.first_element(ctx.input(0)),
         rate,
         1.0f / (1.0f - rate),
         0,
         0};
  if (dropout_per_sequence(ctx.attrs())) {
    const SequenceRows rows = sequence_rows(ctx.input(0).shape());
    m.first = static_cast<std::uint64_t>(ctx.batch_offset() * rows.width);
    m.sequence_width = rows.width;
    m.sequence_length = rows.steps;
  }
  launch_each(ctx, ctx.output().num_elements(), m);
}

void dropout_cuda(KernelContext& ctx) { apply_mask(ctx, dropout_stream(ctx.node())); }
void dropout_grad_cuda(KernelContext& ctx) { apply_mask(ctx, ctx.attrs().i("stream")); }

}  // namespace

TCTL_REGISTER_KERNELS("cuda", {"Dropout", dropout_cuda}, {"DropoutGrad", dropout_grad_cuda});

}  // namespace tctl::cuda
