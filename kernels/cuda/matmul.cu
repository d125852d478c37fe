// CUDA kernels of MatMul on cuBLAS sgemm, with transposes for the gradients, and of FusedMatMul (product,
// bias, ReLU): the product by cuBLAS, then one pass that adds the bias and applies the activation. Also
// BiasAdd and BiasAddGrad, whose column sums are a tree fixed by the shape (no atomics), so every run gives
// the same bits. Definitions in core/ops/matmul.cpp and core/ops/elementwise.cpp.
#include <cublas_v2.h>

#include <algorithm>
#include <vector>

#include "core/ceil_div.h"
#include "core/errors.h"
#include "core/op_registry.h"
#include "core/ops/fused.h"
#include "kernels/cuda/launch.h"

namespace tctl::cuda {
namespace {

// y[m, n] = op(A) op(B), row-major (row_major_gemm).
void gemm(KernelContext& ctx, bool ta, bool tb) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  Tensor& y = ctx.output();
  // Operands of rank 3 and up are the matrices of their rows (matrix_dims; core/ops/matmul.cpp).
  const MatrixDims ma = matrix_dims(a.shape()), my = matrix_dims(y.shape());
  const int m = static_cast<int>(my.rows), n = static_cast<int>(my.cols);
  const int k = static_cast<int>(ta ? ma.rows : ma.cols);
  const int lda = static_cast<int>(ma.cols), ldb = static_cast<int>(matrix_dims(b.shape()).cols);
  // cuBLAS rejects a leading dimension below 1 even where it reads nothing, so an empty product stays here:
  // nothing to write, or (k = 0) zeros, as the CPU's sgemm writes.
  if (m == 0 || n == 0) return;
  if (k == 0) {
    cudaMemsetAsync(y.raw_mutable_data(), 0, y.bytes(), stream_of(ctx));
    check_launch(ctx);  // also reports a failed cudaMemsetAsync
    return;
  }
  row_major_gemm(ctx, m, n, k, GemmOperand{static_cast<const float*>(a.raw_data()), lda, ta},
                 GemmOperand{static_cast<const float*>(b.raw_data()), ldb, tb}, 0.0f,
                 static_cast<float*>(y.raw_mutable_data()), n);
}

__global__ void add_bias(float* y, const float* bias, std::int64_t rows, std::int64_t cols, bool relu) {
  const std::int64_t n = rows * cols;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float v = y[i] + bias[i % cols];
    y[i] = relu && !(v > 0.0f) ? 0.0f : v;
  }
}

__global__ void bias_add(const float* x, const float* bias, float* y, std::int64_t n, std::int64_t cols) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    y[i] = x[i] + bias[i % cols];
}

// BiasAddGrad's column sums. A block sums a tile of `tile` rows by kSumColumns columns: each of its
// kSumLanes rows of threads adds every kSumLanes-th row of the tile in order, then the lanes' sums meet in a
// fixed pairwise tree; the tiles' sums, one row per tile, are summed the same way until one row is left.
// The order depends on the shape alone, not the CPU's first-to-last (within 1e-5 of it), and spreads a tall
// gradient over the GPU: one thread per column, first to last, took half the digits CNN's step for its first
// bias at batch 512 (32,768 rows of 16; cnn_digits_b512 in bench/compare_pytorch_gpu.sh, figures in
// bench/README.md).
constexpr int kSumColumns = 32, kSumLanes = 8;
constexpr std::int64_t kSumTileRows = 256, kMaxTiles = 65535;  // a grid's y extent

__global__ void column_tile_sums(const float* x, float* sums, std::int64_t rows, std::int64_t cols, std::int64_t tile) {
  __shared__ float part[kSumLanes][kSumColumns];
  const std::int64_t j = blockIdx.x * static_cast<std::int64_t>(kSumColumns) + threadIdx.x;
  const std::int64_t first = blockIdx.y * tile, last = first + tile < rows ? first + tile : rows;
  float s = 0.0f;
  if (j < cols)
    for (std::int64_t r = first + threadIdx.y; r < last; r += kSumLanes) s += x[r * cols + j];
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  for (int half = kSumLanes / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.y) < half) part[threadIdx.y][threadIdx.x] += part[threadIdx.y + half][threadIdx.x];
    __syncthreads();
  }
  if (threadIdx.y == 0 && j < cols) sums[blockIdx.y * cols + j] = part[0][threadIdx.x];
}

void matmul_cuda(KernelContext& ctx) {
  gemm(ctx, ctx.attrs().i_or("transpose_a", 0) != 0, ctx.attrs().i_or("transpose_b", 0) != 0);
}

void fused_matmul_cuda(KernelContext& ctx) {
  const bool relu = fused_relu(ctx.attrs());
  gemm(ctx, false, false);
  const Tensor& y = ctx.output();
  const MatrixDims my = matrix_dims(y.shape());
  const std::int64_t rows = my.rows, cols = my.cols;
  if (rows * cols > 0)
    add_bias<<<grid_for(rows * cols), kBlock, 0, stream_of(ctx)>>>(out<float>(ctx), in<float>(ctx, 2), rows, cols,
                                                                   relu);
  check_launch(ctx);
}

void bias_add_cuda(KernelContext& ctx) {
  const std::int64_t n = ctx.input(0).num_elements(), cols = ctx.input(1).num_elements();
  float* y = out<float>(ctx);
  if (n > 0) bias_add<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(in<float>(ctx, 0), in<float>(ctx, 1), y, n, cols);
  check_launch(ctx);
}

void bias_add_grad_cuda(KernelContext& ctx) {
  const std::int64_t cols = ctx.output().num_elements();
  std::int64_t rows = cols == 0 ? 0 : ctx.input(0).num_elements() / cols;
  float* db = out<float>(ctx);
  if (cols > 0 && rows == 0) cudaMemsetAsync(db, 0, ctx.output().bytes(), stream_of(ctx));
  const float* x = in<float>(ctx, 0);
  std::vector<Tensor> partials;  // each pass's tile sums, alive until the pass after them is queued
  while (cols > 0 && rows > 0) {
    const std::int64_t tile = std::max(kSumTileRows, ceil_div(rows, kMaxTiles));
    const std::int64_t tiles = ceil_div(rows, tile);
    float* sums = db;
    if (tiles > 1) {
      partials.push_back(Tensor::empty(DType::kF32, Shape{tiles, cols}, &ctx.device()));
      sums = static_cast<float*>(partials.back().raw_mutable_data());
    }
    const dim3 grid(static_cast<unsigned>(ceil_div(cols, kSumColumns)), static_cast<unsigned>(tiles));
    column_tile_sums<<<grid, dim3(kSumColumns, kSumLanes), 0, stream_of(ctx)>>>(x, sums, rows, cols, tile);
    x = sums;
    rows = tiles == 1 ? 0 : tiles;
  }
  check_launch(ctx);
}

}  // namespace

TCTL_REGISTER_KERNELS("cuda", {"MatMul", matmul_cuda}, {"FusedMatMul", fused_matmul_cuda}, {"BiasAdd", bias_add_cuda},
                      {"BiasAddGrad", bias_add_grad_cuda});

}  // namespace tctl::cuda
