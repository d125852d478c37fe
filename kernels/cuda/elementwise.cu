// CUDA kernels of the element-wise arithmetic: Add, Sub, Mul, Scale, AddN, ZerosLike (definitions in
// core/ops/elementwise.cpp; BiasAdd and BiasAddGrad are in matmul.cu). Inputs have one shape, as on the CPU
// (no broadcasting), and each result is computed as kernels/cpu/elementwise.cpp computes it, so every
// result is bit-identical to the CPU's; AddN adds its inputs left to right like the CPU.
#include "core/op_registry.h"
#include "kernels/cuda/device_math.cuh"

namespace tctl::cuda {
namespace {

struct AddFn {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct SubFn {
  __device__ float operator()(float a, float b) const { return a - b; }
};
struct MulFn {
  __device__ float operator()(float a, float b) const { return a * b; }
};
struct ScaleFn {
  float factor;
  __device__ float operator()(float x) const { return x * factor; }
};

// Input pointers passed by value (kernel parameters), so no pointer table has to be copied to the device.
constexpr int kMaxPack = 32;
struct PointerPack {
  const float* p[kMaxPack];
  int count;
};

// y[i] = p[0][i] + p[1][i] + ... + p[count - 1][i], added left to right.
__global__ void add_pack(PointerPack pack, float* y, std::int64_t n) {
  TCTL_GRID_STRIDE_LOOP(i, n) {
    float s = pack.p[0][i];
    for (int k = 1; k < pack.count; ++k) s += pack.p[k][i];
    y[i] = s;
  }
}

// More inputs than one pack holds go in several launches, each continuing from the partial sum y holds:
// ((x0 + x1) + ...) + x31, then (y + x32) + ..., the order of the CPU's loop, so the same bits.
void add_n_cuda(KernelContext& ctx) {
  const std::int64_t n = ctx.output().num_elements();
  float* y = out<float>(ctx);
  for (int next = 0; next < ctx.num_inputs();) {
    PointerPack pack{};
    if (next > 0) pack.p[pack.count++] = y;
    for (; next < ctx.num_inputs() && pack.count < kMaxPack; ++next) pack.p[pack.count++] = in<float>(ctx, next);
    launch_elements(ctx, n, add_pack, pack, y, n);
  }
}

void add_cuda(KernelContext& ctx) { map_binary(ctx, AddFn{}); }
void sub_cuda(KernelContext& ctx) { map_binary(ctx, SubFn{}); }
void mul_cuda(KernelContext& ctx) { map_binary(ctx, MulFn{}); }
void scale_cuda(KernelContext& ctx) { map_unary(ctx, ScaleFn{static_cast<float>(ctx.attrs().f("factor"))}); }

// Any dtype, like the CPU's memset; check_launch also reports a failed cudaMemsetAsync.
void zeros_like_cuda(KernelContext& ctx) {
  Tensor& y = ctx.output();
  if (y.bytes() > 0) cudaMemsetAsync(y.raw_mutable_data(), 0, y.bytes(), stream_of(ctx));
  check_launch(ctx);
}

}  // namespace

TCTL_REGISTER_KERNELS("cuda", {"Add", add_cuda}, {"Sub", sub_cuda}, {"Mul", mul_cuda}, {"Scale", scale_cuda},
                      {"AddN", add_n_cuda}, {"ZerosLike", zeros_like_cuda});

}  // namespace tctl::cuda
