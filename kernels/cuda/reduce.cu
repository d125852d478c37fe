// CUDA kernels of the reductions to a scalar (Sum, Mean) and their gradients, which broadcast the scalar
// back (definitions in core/ops/reduce.cpp). The CPU adds in index order in double; here one block of
// kSumThreads adds in double too, each thread a strided share in order, then a fixed tree, so the order
// differs but not from run to run. Rounding the double sum to float hides the difference but in rare cases:
// 1 ulp of the float result, or (for a sum that cancels) about n * 2^-52 of the sum of |x|. The gradients
// are bit-identical to the CPU's.
#include "core/op_registry.h"
#include "kernels/cuda/device_math.cuh"

namespace tctl::cuda {
namespace {

constexpr int kSumThreads = 1024;
static_assert(kSumThreads == kWarp * kWarp, "the second tree level is one warp over the warps' sums");

// y[0] = the sum of x[0, n) (divided by n for the mean, 0 when there is nothing to average).
__global__ void sum_all(const float* x, std::int64_t n, float* y, bool mean) {
  __shared__ double warp_sums[kWarp];
  double s = 0.0;
  for (std::int64_t i = threadIdx.x; i < n; i += kSumThreads) s += x[i];
  s = warp_sum(s);
  if (lane_id() == 0) warp_sums[threadIdx.x / kWarp] = s;
  __syncthreads();
  if (threadIdx.x >= kWarp) return;
  s = warp_sum(warp_sums[threadIdx.x]);
  if (threadIdx.x != 0) return;
  if (!mean)
    *y = static_cast<float>(s);
  else
    *y = n == 0 ? 0.0f : static_cast<float>(s / static_cast<double>(n));
}

// dx = dy everywhere, times 1/n (in float, as the CPU) for the mean. dy is read here, not on the host.
__global__ void broadcast_grad(const float* dy, float* dx, std::int64_t n, bool mean) {
  float v = *dy;
  if (mean) v /= static_cast<float>(n);
  TCTL_GRID_STRIDE_LOOP(i, n) dx[i] = v;
}

// Launched even for an empty input: the scalar output still gets its 0.
void reduce(KernelContext& ctx, bool mean) {
  const std::int64_t n = ctx.input(0).num_elements();
  float* y = out<float>(ctx);
  sum_all<<<1, kSumThreads, 0, stream_of(ctx)>>>(in<float>(ctx, 0), n, y, mean);
  check_launch(ctx);
}

// Inputs: dy (a scalar), x (for the shape only).
void reduce_grad(KernelContext& ctx, bool mean) {
  const std::int64_t n = ctx.output().num_elements();
  launch_elements(ctx, n, broadcast_grad, in<float>(ctx, 0), out<float>(ctx), n, mean);
}

void sum_cuda(KernelContext& ctx) { reduce(ctx, false); }
void mean_cuda(KernelContext& ctx) { reduce(ctx, true); }
void sum_grad_cuda(KernelContext& ctx) { reduce_grad(ctx, false); }
void mean_grad_cuda(KernelContext& ctx) { reduce_grad(ctx, true); }

}  // namespace

TCTL_REGISTER_KERNELS("cuda", {"Sum", sum_cuda}, {"SumGrad", sum_grad_cuda}, {"Mean", mean_cuda},
                      {"MeanGrad", mean_grad_cuda});

}  // namespace tctl::cuda
