// Operands of float16 products (core/compute_type.h): float32 values converted to float16, rounded to nearest
// even as round_to does on the host (sim's products, the precision tests), a value past float16's range
// becoming an infinity that the loss scale's guard then finds. bfloat16 products need no pass: cuBLAS
// down-converts their operands as it loads them (kernels/cuda/cuda_util.cpp, reduced_gemm).
#include <cuda_fp16.h>

#include "kernels/cuda/launch.h"

namespace tctl::cuda {
namespace {

__global__ void to_f16(const float* from, __half* to, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    to[i] = __float2half_rn(from[i]);
}

}  // namespace

void convert_to_f16(const KernelContext& ctx, const float* from, void* to, std::int64_t n) {
  if (n == 0) return;
  to_f16<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(from, static_cast<__half*>(to), n);
  check_launch(ctx);
}

}  // namespace tctl::cuda
