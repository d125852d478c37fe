// Operands of float16 products (core/compute_type.h): float32 values converted to float16, rounded to nearest
// even as round_to does on the host (sim's products, the precision tests), a value past float16's range
// becoming an infinity that the loss scale's guard then finds. bfloat16 products need no pass: cuBLAS
// down-converts their operands as it loads them (kernels/cuda/cuda_util.cpp, reduced_gemm).
#include <cuda_fp16.h>

#include "kernels/cuda/launch.h"

namespace tctl::cuda {
namespace {

// Element i of the operand's batch x rows x cols elements, at its place in the layout.
__global__ void to_f16(const float* from, __half* to, std::int64_t n, std::int64_t rows, std::int64_t cols,
                       std::int64_t ld, std::int64_t stride) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = i / (rows * cols), row = i / cols % rows, col = i % cols;
    const std::int64_t at = b * stride + row * ld + col;
    to[at] = __float2half_rn(from[at]);
  }
}

}  // namespace

void convert_to_f16(const KernelContext& ctx, const float* from, void* to, const StridedRows& x) {
  const std::int64_t n = x.batch * x.rows * x.cols;
  if (n == 0) return;
  to_f16<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(from, static_cast<__half*>(to), n, x.rows, x.cols, x.ld, x.stride);
  check_launch(ctx);
}

}  // namespace tctl::cuda
