// Device-side helpers of the CUDA kernel files (for .cu files only): the grid-stride loops over elements and
// over rows a warp each, their launchers (a kernel per element or row, or a functor per index), element-wise map
// kernels, a product that is never fused into an FMA, and warp reductions in a fixed tree. Nothing here uses atomics,
// so a reduction gives the same bits on every run.
#pragma once

#include <cmath>
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/launch.h"

// Loops `i` over [0, n) with every thread of the grid, whatever the grid's size.
#define TCTL_GRID_STRIDE_LOOP(i, n)                                                                \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

// Loops `r` over rows [0, rows) one warp per row: every lane of a warp sees the same rows, so the warp
// reductions below may be called in the body. Needs a block size that is a multiple of 32 (kBlock) and a
// grid of grid_for_rows(rows).
#define TCTL_WARP_ROW_LOOP(r, rows)                                                                               \
  for (std::int64_t r = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) / ::tctl::cuda::kWarp; \
       r < (rows); r += static_cast<std::int64_t>(gridDim.x) * blockDim.x / ::tctl::cuda::kWarp)

namespace tctl::cuda {

inline constexpr int kWarp = 32;
static_assert(kBlock % kWarp == 0, "the row loops need whole warps");

inline unsigned grid_for_rows(std::int64_t rows) { return grid_for(rows * kWarp); }

__device__ inline int lane_id() { return static_cast<int>(threadIdx.x % kWarp); }

// a * b with its own rounding. nvcc fuses a * b + c into one FMA (one rounding) where the CPU build, with
// -ffp-contract=off, rounds twice: a product that feeds a sum goes through mul() to keep the CPU's bits.
__device__ inline float mul(float a, float b) { return __fmul_rn(a, b); }

// The sum over the 32 lanes of a warp; every lane calls it and gets the same bits: a fixed butterfly tree
// in which both lanes of a pair add the same two values (addition is commutative, not associative).
template <class T>
__device__ T warp_sum(T v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The maximum over the 32 lanes, the same in every lane. fmaxf ignores a NaN; where the CPU's running
// std::max would keep one instead, the softmax that follows is NaN either way.
__device__ inline float warp_max(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// What the CPU's softmax_row computes of a row x[0, c) before normalising: its maximum and the sum of
// exp(x[j] - max). Lane l adds columns l, l + 32, ... in order, then the lanes' sums meet in warp_sum's
// tree: a different order from the CPU's left to right, so the sum may differ in its last bits.
struct SoftmaxStats {
  float max;
  float sum;
};
__device__ inline SoftmaxStats warp_softmax_stats(const float* x, std::int64_t c) {
  float mx = -INFINITY;
  for (std::int64_t j = lane_id(); j < c; j += kWarp) mx = fmaxf(mx, x[j]);
  mx = warp_max(mx);
  float sum = 0.0f;
  for (std::int64_t j = lane_id(); j < c; j += kWarp) sum += expf(x[j] - mx);
  return {mx, warp_sum(sum)};
}

template <class F>
__global__ void map1_kernel(const float* x, float* y, std::int64_t n, F f) {
  TCTL_GRID_STRIDE_LOOP(i, n) y[i] = f(x[i]);
}

template <class F>
__global__ void map2_kernel(const float* a, const float* b, float* y, std::int64_t n, F f) {
  TCTL_GRID_STRIDE_LOOP(i, n) y[i] = f(a[i], b[i]);
}

// Launches kernel(args...) on the device's stream with a thread per element of n (launch_elements) or a
// warp per row of `rows` (launch_rows), then checks the launch; launches nothing when there is no work.
template <class Kernel, class... Args>
void launch_elements(KernelContext& ctx, std::int64_t n, Kernel kernel, Args... args) {
  if (n > 0) kernel<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(args...);
  check_launch(ctx);
}
template <class Kernel, class... Args>
void launch_rows(KernelContext& ctx, std::int64_t rows, Kernel kernel, Args... args) {
  if (rows > 0) kernel<<<grid_for_rows(rows), kBlock, 0, stream_of(ctx)>>>(args...);
  check_launch(ctx);
}

template <class F>
__global__ void each_index(std::int64_t n, F f) {
  TCTL_GRID_STRIDE_LOOP(i, n) f(i);
}

// Calls f(i) on the device for every i in [0, n) (f: a functor with a __device__ operator()(std::int64_t)),
// queued on the device's stream; launches nothing when n is 0, and checks the launch either way.
template <class F>
void launch_each(const KernelContext& ctx, std::int64_t n, const F& f) {
  if (n > 0) each_index<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(n, f);
  check_launch(ctx);
}

// y = f(x) element by element, x the op's input 0.
template <class F>
void map_unary(KernelContext& ctx, F f) {
  const std::int64_t n = ctx.output().num_elements();
  launch_elements(ctx, n, map1_kernel<F>, in<float>(ctx, 0), out<float>(ctx), n, f);
}

// y = f(a, b) element by element, a and b the op's inputs 0 and 1 (of the same shape: no broadcasting).
template <class F>
void map_binary(KernelContext& ctx, F f) {
  const std::int64_t n = ctx.output().num_elements();
  launch_elements(ctx, n, map2_kernel<F>, in<float>(ctx, 0), in<float>(ctx, 1), out<float>(ctx), n, f);
}

// Column sums of a [rows, cols] matrix given element by element (value(r, c), a functor with a __device__
// operator()) into out[cols]: each chunk of kColumnChunk rows adds its rows in order into a partial, then the
// partials are added in chunk order. No atomics: the same bits on every run, and a tall matrix spread over
// the GPU (one thread per column over every row would run a few hundred threads).
inline constexpr std::int64_t kColumnChunk = 256;

template <class F>
__global__ void column_chunk_partials(F value, float* partials, std::int64_t rows, std::int64_t cols,
                                      std::int64_t chunks) {
  TCTL_GRID_STRIDE_LOOP(e, chunks * cols) {
    const std::int64_t chunk = e / cols, c = e % cols;
    const std::int64_t end = min(rows, (chunk + 1) * kColumnChunk);
    float s = 0.0f;
    for (std::int64_t r = chunk * kColumnChunk; r < end; ++r) s += value(r, c);
    partials[e] = s;
  }
}

// A template only so that every .cu file may define it from this header.
template <class T>
__global__ void add_column_partials(const T* partials, T* out, std::int64_t chunks, std::int64_t cols) {
  TCTL_GRID_STRIDE_LOOP(c, cols) {
    T s = 0;
    for (std::int64_t k = 0; k < chunks; ++k) s += partials[k * cols + c];
    out[c] = s;
  }
}

template <class F>
void column_sums(KernelContext& ctx, std::int64_t rows, std::int64_t cols, F value, float* out) {
  const std::int64_t chunks = ceil_div(rows, kColumnChunk);
  if (chunks == 0) {
    cudaMemsetAsync(out, 0, static_cast<std::size_t>(cols) * sizeof(float), stream_of(ctx));
    check_launch(ctx);
    return;
  }
  const Tensor partials = Tensor::empty(DType::kF32, Shape{chunks * cols}, &ctx.device());
  auto* p = static_cast<float*>(partials.raw_mutable_data());
  launch_elements(ctx, chunks * cols, column_chunk_partials<F>, value, p, rows, cols, chunks);
  launch_elements(ctx, cols, add_column_partials<float>, static_cast<const float*>(p), out, chunks, cols);
}

}  // namespace tctl::cuda
