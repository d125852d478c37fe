// CPU kernels of the activations and their gradients: ReLU, leaky ReLU, ELU, GELU, sigmoid, tanh, softmax
// (definitions in core/ops/activations.cpp).
#include <cmath>

#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {
namespace {

template <class Fn>
void unary_cpu(KernelContext& ctx, Fn fn) {
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output().mutable_data<float>();
  for_each_element(ctx, ctx.output().num_elements(), [&](std::int64_t i) { y[i] = fn(x[i]); });
}

// Gradient kernels take (dy, z), where z is the forward input or output as each formula needs.
template <class Fn>
void grad_cpu(KernelContext& ctx, Fn fn) {
  const float* dy = ctx.input(0).data<float>();
  const float* z = ctx.input(1).data<float>();
  float* dx = ctx.output().mutable_data<float>();
  for_each_element(ctx, ctx.output().num_elements(), [&](std::int64_t i) { dx[i] = fn(dy[i], z[i]); });
}

void relu_cpu(KernelContext& ctx) {
  unary_cpu(ctx, [](float x) { return x > 0.0f ? x : 0.0f; });
}
void relu_grad_cpu(KernelContext& ctx) {
  grad_cpu(ctx, [](float dy, float x) { return x > 0.0f ? dy : 0.0f; });
}

// alpha x for x < 0; the "alpha" attribute (models/nn/activations.cpp passes Keras 3's 0.2).
void leaky_relu_cpu(KernelContext& ctx) {
  const float alpha = static_cast<float>(ctx.attrs().f("alpha"));
  unary_cpu(ctx, [alpha](float x) { return x > 0.0f ? x : alpha * x; });
}
void leaky_relu_grad_cpu(KernelContext& ctx) {
  const float alpha = static_cast<float>(ctx.attrs().f("alpha"));
  grad_cpu(ctx, [alpha](float dy, float x) { return x > 0.0f ? dy : alpha * dy; });
}

// alpha (e^x - 1) for x < 0; expm1 keeps precision near 0.
void elu_cpu(KernelContext& ctx) {
  const float alpha = static_cast<float>(ctx.attrs().f("alpha"));
  unary_cpu(ctx, [alpha](float x) { return x > 0.0f ? x : alpha * std::expm1(x); });
}
void elu_grad_cpu(KernelContext& ctx) {
  const float alpha = static_cast<float>(ctx.attrs().f("alpha"));
  grad_cpu(ctx, [alpha](float dy, float x) { return x > 0.0f ? dy : dy * alpha * std::exp(x); });
}

// The exact GELU, x Phi(x) with the normal CDF through erf: Keras' default (approximate=False), not the
// tanh approximation.
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
void gelu_cpu(KernelContext& ctx) {
  unary_cpu(ctx, [](float x) { return 0.5f * x * (1.0f + std::erf(x * kInvSqrt2)); });
}
// d/dx x Phi(x) = Phi(x) + x phi(x).
void gelu_grad_cpu(KernelContext& ctx) {
  grad_cpu(ctx, [](float dy, float x) {
    return dy * (0.5f * (1.0f + std::erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * std::exp(-0.5f * x * x));
  });
}

void sigmoid_cpu(KernelContext& ctx) {
  unary_cpu(ctx, [](float x) { return 1.0f / (1.0f + std::exp(-x)); });
}
void sigmoid_grad_cpu(KernelContext& ctx) {
  grad_cpu(ctx, [](float dy, float y) { return dy * y * (1.0f - y); });
}

void tanh_cpu(KernelContext& ctx) {
  unary_cpu(ctx, [](float x) { return std::tanh(x); });
}
void tanh_grad_cpu(KernelContext& ctx) {
  grad_cpu(ctx, [](float dy, float y) { return dy * (1.0f - y * y); });
}

// Row-wise over the last dimension.
void softmax_cpu(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::int64_t c = x.shape()[x.shape().rank() - 1];
  const std::int64_t rows = x.num_elements() / c;
  const float* px = x.data<float>();
  float* y = ctx.output().mutable_data<float>();
  ctx.parallel_for(rows, std::max<std::int64_t>(1, kElementwiseGrain / c), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) softmax_row(px + r * c, c, y + r * c);
  });
}

// dx = y * (dy - sum(dy * y)) per row.
void softmax_grad_cpu(KernelContext& ctx) {
  const float* dy = ctx.input(0).data<float>();
  const Tensor& yt = ctx.input(1);
  const float* y = yt.data<float>();
  const std::int64_t c = yt.shape()[yt.shape().rank() - 1];
  const std::int64_t rows = yt.num_elements() / c;
  float* dx = ctx.output().mutable_data<float>();
  ctx.parallel_for(rows, std::max<std::int64_t>(1, kElementwiseGrain / c), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      float dot = 0.0f;
      for (std::int64_t j = 0; j < c; ++j) dot += dy[r * c + j] * y[r * c + j];
      for (std::int64_t j = 0; j < c; ++j) dx[r * c + j] = y[r * c + j] * (dy[r * c + j] - dot);
    }
  });
}

}  // namespace

TCTL_REGISTER_KERNELS("cpu", {"Relu", relu_cpu}, {"ReluGrad", relu_grad_cpu}, {"LeakyRelu", leaky_relu_cpu},
                      {"LeakyReluGrad", leaky_relu_grad_cpu}, {"Elu", elu_cpu}, {"EluGrad", elu_grad_cpu},
                      {"Gelu", gelu_cpu}, {"GeluGrad", gelu_grad_cpu}, {"Sigmoid", sigmoid_cpu},
                      {"SigmoidGrad", sigmoid_grad_cpu}, {"Tanh", tanh_cpu}, {"TanhGrad", tanh_grad_cpu},
                      {"Softmax", softmax_cpu}, {"SoftmaxGrad", softmax_grad_cpu});

}  // namespace tctl::cpu
