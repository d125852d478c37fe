// Activations on the GPU, computed as the CPU kernels compute them (kernels/cpu/activations.cpp), in the
// same float operations and order: ReLU, leaky ReLU and the gradients of ReLU, leaky ReLU, sigmoid and tanh
// are bit-identical; where expf, expm1f, erff or tanhf enter, CUDA's results are within a few ulp of glibc's.
// Softmax and its gradient go one warp per row (device_math.cuh): the row sums add in a fixed tree rather
// than left to right, so they may differ from the CPU's in the last bits, never from run to run.
#include "core/op_registry.h"
#include "kernels/cuda/device_math.cuh"

namespace tctl::cuda {
namespace {

// The CPU's constants, 1/sqrt(2) and 1/sqrt(2 pi), rounded to float.
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

// The gradients take (dy, z), where z is the forward input or output as each formula needs.
struct Relu {
  __device__ float operator()(float x) const { return x > 0.0f ? x : 0.0f; }
};
struct ReluGrad {
  __device__ float operator()(float dy, float x) const { return x > 0.0f ? dy : 0.0f; }
};
struct LeakyRelu {
  float alpha;
  __device__ float operator()(float x) const { return x > 0.0f ? x : alpha * x; }
};
struct LeakyReluGrad {
  float alpha;
  __device__ float operator()(float dy, float x) const { return x > 0.0f ? dy : alpha * dy; }
};
struct Elu {
  float alpha;
  __device__ float operator()(float x) const { return x > 0.0f ? x : alpha * expm1f(x); }
};
struct EluGrad {
  float alpha;
  __device__ float operator()(float dy, float x) const { return x > 0.0f ? dy : dy * alpha * expf(x); }
};
struct Gelu {  // the exact GELU, x Phi(x), as the CPU's
  __device__ float operator()(float x) const { return 0.5f * x * (1.0f + erff(x * kInvSqrt2)); }
};
struct GeluGrad {  // Phi(x) + x phi(x)
  __device__ float operator()(float dy, float x) const {
    return dy * (mul(0.5f, 1.0f + erff(x * kInvSqrt2)) + mul(x * kInvSqrt2Pi, expf(-0.5f * x * x)));
  }
};
struct Sigmoid {
  __device__ float operator()(float x) const { return 1.0f / (1.0f + expf(-x)); }
};
struct SigmoidGrad {  // from the output y
  __device__ float operator()(float dy, float y) const { return dy * y * (1.0f - y); }
};
struct Tanh {
  __device__ float operator()(float x) const { return tanhf(x); }
};
struct TanhGrad {  // from the output y
  __device__ float operator()(float dy, float y) const { return dy * (1.0f - mul(y, y)); }
};

float alpha_of(const KernelContext& ctx) { return static_cast<float>(ctx.attrs().f("alpha")); }

// Each row of c over the last axis: y = exp(x - max) * (1 / sum), the exponentials computed again for the
// output rather than kept (expf gives the same bits both times).
__global__ void softmax_rows(const float* x, float* y, std::int64_t rows, std::int64_t c) {
  TCTL_WARP_ROW_LOOP(r, rows) {
    const float* xr = x + r * c;
    const SoftmaxStats s = warp_softmax_stats(xr, c);
    const float inv = 1.0f / s.sum;
    for (std::int64_t j = lane_id(); j < c; j += kWarp) y[r * c + j] = expf(xr[j] - s.max) * inv;
  }
}

// dx = y * (dy - sum(dy * y)) per row.
__global__ void softmax_grad_rows(const float* dy, const float* y, float* dx, std::int64_t rows, std::int64_t c) {
  TCTL_WARP_ROW_LOOP(r, rows) {
    const std::int64_t row = r * c;
    float dot = 0.0f;
    for (std::int64_t j = lane_id(); j < c; j += kWarp) dot += mul(dy[row + j], y[row + j]);
    dot = warp_sum(dot);
    for (std::int64_t j = lane_id(); j < c; j += kWarp) dx[row + j] = y[row + j] * (dy[row + j] - dot);
  }
}

// A tensor as rows of its last axis, c wide; no rows when it is empty (where the CPU would divide by c = 0).
struct Rows {
  std::int64_t rows;
  std::int64_t c;
};
Rows rows_of(const Tensor& t) {
  const std::int64_t c = t.shape()[t.shape().rank() - 1];
  return {t.num_elements() == 0 ? 0 : t.num_elements() / c, c};
}

void softmax_cuda(KernelContext& ctx) {
  const auto [rows, c] = rows_of(ctx.input(0));
  launch_rows(ctx, rows, softmax_rows, in<float>(ctx, 0), out<float>(ctx), rows, c);
}

// Inputs (dy, y).
void softmax_grad_cuda(KernelContext& ctx) {
  const auto [rows, c] = rows_of(ctx.input(1));
  launch_rows(ctx, rows, softmax_grad_rows, in<float>(ctx, 0), in<float>(ctx, 1), out<float>(ctx), rows, c);
}

void relu_cuda(KernelContext& ctx) { map_unary(ctx, Relu{}); }
void relu_grad_cuda(KernelContext& ctx) { map_binary(ctx, ReluGrad{}); }
void leaky_relu_cuda(KernelContext& ctx) { map_unary(ctx, LeakyRelu{alpha_of(ctx)}); }
void leaky_relu_grad_cuda(KernelContext& ctx) { map_binary(ctx, LeakyReluGrad{alpha_of(ctx)}); }
void elu_cuda(KernelContext& ctx) { map_unary(ctx, Elu{alpha_of(ctx)}); }
void elu_grad_cuda(KernelContext& ctx) { map_binary(ctx, EluGrad{alpha_of(ctx)}); }
void gelu_cuda(KernelContext& ctx) { map_unary(ctx, Gelu{}); }
void gelu_grad_cuda(KernelContext& ctx) { map_binary(ctx, GeluGrad{}); }
void sigmoid_cuda(KernelContext& ctx) { map_unary(ctx, Sigmoid{}); }
void sigmoid_grad_cuda(KernelContext& ctx) { map_binary(ctx, SigmoidGrad{}); }
void tanh_cuda(KernelContext& ctx) { map_unary(ctx, Tanh{}); }
void tanh_grad_cuda(KernelContext& ctx) { map_binary(ctx, TanhGrad{}); }

}  // namespace

TCTL_REGISTER_KERNELS("cuda", {"Relu", relu_cuda}, {"ReluGrad", relu_grad_cuda}, {"LeakyRelu", leaky_relu_cuda},
                      {"LeakyReluGrad", leaky_relu_grad_cuda}, {"Elu", elu_cuda}, {"EluGrad", elu_grad_cuda},
                      {"Gelu", gelu_cuda}, {"GeluGrad", gelu_grad_cuda}, {"Sigmoid", sigmoid_cuda},
                      {"SigmoidGrad", sigmoid_grad_cuda}, {"Tanh", tanh_cuda}, {"TanhGrad", tanh_grad_cuda},
                      {"Softmax", softmax_cuda}, {"SoftmaxGrad", softmax_grad_cuda});

}  // namespace tctl::cuda
