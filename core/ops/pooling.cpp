// MaxPool2D and AvgPool2D on NHWC float32 inputs (attributes window, strides, padding), and their gradients,
// which take (dy, x) and the forward op's attributes. Padding never takes part: a max is over the input
// elements a window covers, and an average divides by their count, as TF does.
#include "core/ops/ops.h"

#include "core/autodiff.h"
#include "core/ops/window.h"

namespace tctl {
namespace {

TensorSpec pool_infer(const InferContext& c) {
  c.expect_rank(0, 4);
  c.expect_dtype(0, DType::kF32);
  const auto& window = c.attrs().ints("window");
  if (window.size() != 2) c.fail("window must be two positive integers");
  const WindowGeometry g = infer_window(c, c.shape(0), window[0], window[1], "pool");
  return {DType::kF32, Shape{c.shape(0)[0], g.h.out, g.w.out, g.channels}};
}

TensorSpec pool_grad_infer(const InferContext& c) { return c.input(1); }

// The profiler's count, one operation per element a window covers, from the pooled side: the output, or
// the gradient dy a gradient op reads.
std::int64_t pool_flops(std::span<const TensorSpec>, const TensorSpec& output, const Attrs& attrs) {
  const auto& window = attrs.ints("window");
  return cost_product(cost_elements(output.shape), window[0] * window[1]);
}
std::int64_t pool_grad_flops(std::span<const TensorSpec> inputs, const TensorSpec& output, const Attrs& attrs) {
  return pool_flops(inputs, inputs[0], attrs);
}

}  // namespace

void define_pooling_ops() {
  register_op({.name = "MaxPool2D",
               .infer = pool_infer,
               .grad =
                   [](GradBuilder& g) {
                     return std::vector<Output>{g.op("MaxPool2DGrad", {g.dy(), g.x(0)}, g.attrs())};
                   },
               .flops = pool_flops});
  register_op({.name = "MaxPool2DGrad", .num_inputs = 2, .infer = pool_grad_infer, .flops = pool_grad_flops});
  register_op({.name = "AvgPool2D",
               .infer = pool_infer,
               .grad =
                   [](GradBuilder& g) {
                     return std::vector<Output>{g.op("AvgPool2DGrad", {g.dy(), g.x(0)}, g.attrs())};
                   },
               .flops = pool_flops});
  register_op({.name = "AvgPool2DGrad", .num_inputs = 2, .infer = pool_grad_infer, .flops = pool_grad_flops});
}

}  // namespace tctl
