// CUDA kernels of dynamic loss scaling's AllFinite and MulScalar (definitions in core/ops/loss_scale.cpp),
// computed as the CPU's (kernels/cpu/loss_scale.cpp): the same verdict, the same bits. LossScaleFactor and
// UpdateLossScale run on the host, beside the scale they read and write (models/train/optimizer.cpp).
#include "core/op_registry.h"
#include "kernels/cuda/launch.h"

namespace tctl::cuda {
namespace {

__global__ void set_one(float* verdict) { *verdict = 1.0f; }

// Every thread that meets a NaN or an infinity writes the same 0, so the order they meet in does not matter.
__global__ void clear_unless_finite(const float* x, std::int64_t n, float* verdict) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    if (!isfinite(x[i])) *verdict = 0.0f;
}

void all_finite_cuda(KernelContext& ctx) {
  float* verdict = out<float>(ctx);
  set_one<<<1, 1, 0, stream_of(ctx)>>>(verdict);
  for (int k = 0; k < ctx.num_inputs(); ++k) {
    const std::int64_t n = ctx.input(k).num_elements();
    if (n > 0) clear_unless_finite<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(in<float>(ctx, k), n, verdict);
  }
  check_launch(ctx);
}

// The scalar is read on the device, inside the kernel (no host wait).
__global__ void mul_scalar(const float* x, const float* s, float* y, std::int64_t n) {
  const float scale = *s;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    y[i] = __fmul_rn(x[i], scale);
}

void mul_scalar_cuda(KernelContext& ctx) {
  const std::int64_t n = ctx.input(0).num_elements();
  float* y = out<float>(ctx);
  if (n > 0) mul_scalar<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(in<float>(ctx, 0), in<float>(ctx, 1), y, n);
  check_launch(ctx);
}

}  // namespace

TCTL_REGISTER_KERNELS("cuda", {"AllFinite", all_finite_cuda}, {"MulScalar", mul_scalar_cuda});

}  // namespace tctl::cuda
