// Conv2D on NHWC float32 inputs with [kh, kw, C, F] kernels (Keras' layout), FusedConv2D(x, kernel, bias)
// (a Conv2D layer's convolution, bias and activation in one node), and the two gradients:
// Conv2DInputGrad (dy, kernel, x) and Conv2DKernelGrad (x, dy), with the window's attributes.
#include "core/ops/ops.h"

#include "core/autodiff.h"
#include "core/ops/fused.h"
#include "core/ops/window.h"

namespace tctl {
namespace {

TensorSpec conv2d_infer(const InferContext& c) {
  c.expect_rank(0, 4);
  c.expect_rank(1, 4);
  c.expect_dtype(0, DType::kF32);
  c.expect_dtype(1, DType::kF32);
  const Shape& x = c.shape(0);
  const Shape& k = c.shape(1);
  if (x[3] >= 0 && k[2] != x[3])
    c.fail("kernel " + k.to_string() + " expects " + std::to_string(k[2]) + " input channels but the input " +
           x.to_string() + " has " + std::to_string(x[3]));
  const WindowGeometry g = infer_window(c, x, k[0], k[1], "kernel");
  return {DType::kF32, Shape{x[0], g.h.out, g.w.out, k[3]}};
}

TensorSpec conv2d_input_grad_infer(const InferContext& c) { return c.input(2); }

TensorSpec conv2d_kernel_grad_infer(const InferContext& c) {
  const auto& window = c.attrs().ints("window");
  return {DType::kF32, Shape{window[0], window[1], c.shape(0)[3], c.shape(1)[3]}};
}

// Multiply-adds of the direct method, the same for the convolution and both gradients: every output pixel
// of every image (`pixels`, the output or its gradient over the filters) against each of the kernel's
// kh x kw x C x F weights.
std::int64_t conv_macs(const Shape& y, const Shape& kernel) {
  if (y.rank() != 4) return kUnknownCost;
  return cost_product(cost_product(cost_product(y[0], y[1]), y[2]), cost_elements(kernel));
}

// Conv2D and FusedConv2D (x, kernel[, bias]) -> y; Conv2DInputGrad (dy, kernel, x); Conv2DKernelGrad (x, dy).
std::int64_t conv2d_cost(std::span<const TensorSpec> in, const TensorSpec& out, const Attrs&) {
  return conv_macs(out.shape, in[1].shape);
}
std::int64_t conv2d_input_grad_cost(std::span<const TensorSpec> in, const TensorSpec&, const Attrs&) {
  return conv_macs(in[0].shape, in[1].shape);
}
std::int64_t conv2d_kernel_grad_cost(std::span<const TensorSpec> in, const TensorSpec& out, const Attrs&) {
  return conv_macs(in[1].shape, out.shape);
}

// The profiler's counts: a multiply-add is two operations.
std::int64_t conv2d_flops(std::span<const TensorSpec> in, const TensorSpec& out, const Attrs& attrs) {
  return cost_product(2, conv2d_cost(in, out, attrs));
}
std::int64_t conv2d_input_grad_flops(std::span<const TensorSpec> in, const TensorSpec& out, const Attrs& attrs) {
  return cost_product(2, conv2d_input_grad_cost(in, out, attrs));
}
std::int64_t conv2d_kernel_grad_flops(std::span<const TensorSpec> in, const TensorSpec& out, const Attrs& attrs) {
  return cost_product(2, conv2d_kernel_grad_cost(in, out, attrs));
}

Attrs window_attrs(const Attrs& conv, std::int64_t kh, std::int64_t kw) {
  return Attrs{
      {"strides", conv.ints("strides")}, {"padding", conv.s("padding")}, {"window", std::vector<std::int64_t>{kh, kw}}};
}

// The gradients of conv(x, kernel) for the output gradient dy.
std::vector<Output> convolution_grads(GradBuilder& g, Output dy) {
  const Shape k = g.spec(g.x(1)).shape;  // a copy: g.op may move the node it lives in
  const Attrs attrs = window_attrs(g.attrs(), k[0], k[1]);
  // The first layer's input gradient is dead work: made only when needed.
  Output dx = g.needs(0) ? g.op("Conv2DInputGrad", {dy, g.x(1), g.x(0)}, attrs) : Output{};
  return {dx, g.needs(1) ? g.op("Conv2DKernelGrad", {g.x(0), dy}, attrs) : Output{}};
}

std::vector<Output> conv2d_grad(GradBuilder& g) { return convolution_grads(g, g.dy()); }

std::vector<Output> fused_conv2d_grad(GradBuilder& g) {
  return fused_grads(g, [&](Output dz) { return convolution_grads(g, dz); });
}

}  // namespace

void define_conv_ops() {
  register_op({.name = "Conv2D",
               .num_inputs = 2,
               .infer = conv2d_infer,
               .grad = conv2d_grad,
               .cost = conv2d_cost,
               .flops = conv2d_flops,
               .products = true});
  register_op({.name = "FusedConv2D",
               .num_inputs = 3,
               .infer = fused_infer(conv2d_infer, "filters"),
               .grad = fused_conv2d_grad,
               .cost = conv2d_cost,
               .flops = conv2d_flops,
               .products = true});
  register_op({.name = "Conv2DInputGrad",
               .num_inputs = 3,
               .infer = conv2d_input_grad_infer,
               .cost = conv2d_input_grad_cost,
               .flops = conv2d_input_grad_flops,
               .products = true});
  register_op({.name = "Conv2DKernelGrad",
               .num_inputs = 2,
               .infer = conv2d_kernel_grad_infer,
               .cost = conv2d_kernel_grad_cost,
               .flops = conv2d_kernel_grad_flops,
               .products = true});
}

}  // namespace tctl
