// CUDA kernels of Dropout and DropoutGrad (definitions in core/ops/dropout.cpp, CPU kernels in
// kernels/cpu/dropout.cpp): the same mask as the CPU's, bit for bit, since element i's draw is
// uniform_at(key, first + i) of core/counter_random.h on both, with the key of (seed, stream, step) and the
// first element of the run's rows (KernelContext::first_element) made on the host.
// Kept elements are x / (1 - rate) as the CPU computes them: the same bits.
#include "core/op_registry.h"
#include "core/ops/dropout.h"
#include "kernels/cuda/device_math.cuh"

namespace tctl::cuda {
namespace {

struct Mask {
  const float* x;
  float* y;
  std::uint64_t key;
  std::uint64_t first;
  float rate, keep_scale;
  __device__ void operator()(std::int64_t i) const {
    y[i] = uniform_at(key, first + static_cast<std::uint64_t>(i)) < rate ? 0.0f : x[i] * keep_scale;
  }
};

// y = x masked with the draws of random stream `stream` in this step; x is input 0 (dy for the gradient).
void apply_mask(KernelContext& ctx, std::int64_t stream) {
  const float rate = static_cast<float>(ctx.attrs().f("rate"));
  launch_each(ctx, ctx.output().num_elements(),
              Mask{in<float>(ctx, 0), out<float>(ctx), ctx.random_key(stream), ctx.first_element(ctx.input(0)), rate,
                   1.0f / (1.0f - rate)});
}

void dropout_cuda(KernelContext& ctx) { apply_mask(ctx, dropout_stream(ctx.node())); }
void dropout_grad_cuda(KernelContext& ctx) { apply_mask(ctx, ctx.attrs().i("stream")); }

}  // namespace

TCTL_REGISTER_KERNELS("cuda", {"Dropout", dropout_cuda}, {"DropoutGrad", dropout_grad_cuda});

}  // namespace tctl::cuda
