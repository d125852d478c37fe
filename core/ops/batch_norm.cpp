// Batch normalization over the last axis: the batch statistics (BatchNormMean, BatchNormVariance), the
// normalization itself (BatchNorm) and the moving-average update of the inference statistics
// (AssignMovingAverage). A training-mode layer wires BatchNorm to the batch statistics, so autodiff
// differentiates through them; an inference-mode layer wires it to the moving ones.
//
// BatchNorm takes x [..., C], mean, variance, gamma, beta (each [C]); BatchNormGrad takes
// (dy, x, mean, variance, gamma) and its attribute "wrt" picks the input differentiated: 0 x, 1 mean,
// 2 variance, 3 gamma (beta's gradient is BiasAddGrad of dy). The statistics' gradients take (d stat, x).
//
// BatchNormMaskedMean and BatchNormMaskedVariance take (x [N, S, C], mask [N, S]) and give Keras 3's
// masked moments, over the steps the mask holds 1 for: mean = sum m x / (sum m + 1e-7), variance =
// sum m (x - mean)^2 / (sum m + 1e-7), Keras' epsilon in the divisor. Their gradients take (d stat, x, mask);
// the mask gets none.
#include "core/ops/ops.h"

#include "core/autodiff.h"

namespace tctl {
namespace {

TensorSpec channels_infer(const InferContext& c) {
  c.expect_dtype(0, DType::kF32);
  if (c.shape(0).rank() < 2) c.fail("input must have a batch and a channel dimension, got " + c.shape(0).to_string());
  return {DType::kF32, Shape{c.shape(0)[c.shape(0).rank() - 1]}};
}

TensorSpec batch_norm_infer(const InferContext& c) {
  const TensorSpec channels = channels_infer(c);
  for (int i = 1; i < 5; ++i) {
    c.expect_dtype(i, DType::kF32);
    if (!(c.shape(i) == channels.shape))
      c.fail("input " + std::to_string(i) + " has shape " + c.shape(i).to_string() + " but the input " +
             c.shape(0).to_string() + " has " + std::to_string(channels.shape[0]) + " channels");
  }
  return c.input(0);
}

TensorSpec batch_norm_grad_infer(const InferContext& c) { return c.attrs().i("wrt") == 0 ? c.input(1) : c.input(2); }

std::vector<Output> batch_norm_grad(GradBuilder& g) {
  std::vector<Output> grads;
  for (std::int64_t wrt = 0; wrt < 4; ++wrt)
    grads.push_back(g.op("BatchNormGrad", {g.dy(), g.x(0), g.x(1), g.x(2), g.x(3)},
                         Attrs{{"epsilon", g.attrs().f("epsilon")}, {"wrt", wrt}}));
  grads.push_back(g.op("BiasAddGrad", {g.dy()}));
  return grads;
}

TensorSpec like_second(const InferContext& c) { return c.input(1); }

// The mask input `i` of the masked moments of x, input `i` - 1: x's shape without its channel axis.
void check_moments_mask(const InferContext& c, int i) {
  c.expect_dtype(i, DType::kF32);
  const Shape& x = c.shape(i - 1);
  const Shape& mask = c.shape(i);
  bool fits = mask.rank() + 1 == x.rank();
  for (int d = 0; fits && d < mask.rank(); ++d) fits = mask[d] == x[d] || mask[d] < 0 || x[d] < 0;
  if (!fits) c.fail("mask " + mask.to_string() + " does not fit " + x.to_string() + " without its channel axis");
}

TensorSpec masked_moments_infer(const InferContext& c) {
  check_moments_mask(c, 1);
  return channels_infer(c);
}

TensorSpec masked_moments_grad_infer(const InferContext& c) {
  check_moments_mask(c, 2);
  return c.input(1);
}

// The output is unused: the op updates its variable.
TensorSpec assign_moving_average_infer(const InferContext& c) {
  c.expect_dtype(0, DType::kF32);
  return {DType::kF32, Shape{}};
}

}  // namespace

void define_batch_norm_ops() {
  register_op({.name = "BatchNorm", .num_inputs = 5, .infer = batch_norm_infer, .grad = batch_norm_grad});
  register_op({.name = "BatchNormGrad", .num_inputs = 5, .infer = batch_norm_grad_infer});
  register_op({.name = "BatchNormMean", .infer = channels_infer, .grad = [](GradBuilder& g) {
                 return std::vector<Output>{g.op("BatchNormMeanGrad", {g.dy(), g.x(0)})};
               }});
  register_op({.name = "BatchNormMeanGrad", .num_inputs = 2, .infer = like_second});
  register_op({.name = "BatchNormVariance", .infer = channels_infer, .grad = [](GradBuilder& g) {
                 return std::vector<Output>{g.op("BatchNormVarianceGrad", {g.dy(), g.x(0)})};
               }});
  register_op({.name = "BatchNormVarianceGrad", .num_inputs = 2, .infer = like_second});
  register_op(
      {.name = "BatchNormMaskedMean", .num_inputs = 2, .infer = masked_moments_infer, .grad = [](GradBuilder& g) {
         return masked_op_grad(g, "BatchNormMaskedMeanGrad");
       }});
  register_op({.name = "BatchNormMaskedMeanGrad", .num_inputs = 3, .infer = masked_moments_grad_infer});
  register_op(
      {.name = "BatchNormMaskedVariance", .num_inputs = 2, .infer = masked_moments_infer, .grad = [](GradBuilder& g) {
         return masked_op_grad(g, "BatchNormMaskedVarianceGrad");
       }});
  register_op({.name = "BatchNormMaskedVarianceGrad", .num_inputs = 3, .infer = masked_moments_grad_infer});
  register_op({.name = "AssignMovingAverage", .infer = assign_moving_average_infer});
}

}  // namespace tctl
