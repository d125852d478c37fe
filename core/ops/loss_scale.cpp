// Dynamic loss scaling (the mixed_float16 precision policy, models/train/optimizer.h), as Keras'
// LossScaleOptimizer: the loss is multiplied by a scale before the gradients are taken, so small float16
// gradients do not flush to zero, and the gradients are divided by it again before the updates; a step whose
// gradients overflowed is skipped whole and the scale halved.
//   AllFinite(x1, ..., xn)          float scalar: 1 when every element of every input is finite, else 0
//   LossScaleFactor(finite, scale)  float scalar 1 / scale when finite is not 0; otherwise dead (OpDef::may_skip):
//                                   every node that reads it, the updates through their gradients, is skipped
//   MulScalar(x, s)                 x * s, s a float scalar
//   UpdateLossScale(finite)         variables scale, good_steps, skipped_steps: a finite step adds one good
//                                   step and doubles the scale after "growth_steps" of them in a row (good
//                                   steps back to 0); an overflow halves it (not below 1), zeroes the good
//                                   steps and counts a skipped step. Output unused.
#include "core/ops/ops.h"

#include "core/autodiff.h"
#include "core/op_registry.h"

namespace tctl {
namespace {

TensorSpec scalar_f32() { return {DType::kF32, Shape{}}; }

TensorSpec all_finite_infer(const InferContext& c) {
  if (c.num_inputs() == 0) c.fail("needs at least one input");
  for (int i = 0; i < c.num_inputs(); ++i) c.expect_dtype(i, DType::kF32);
  return scalar_f32();
}

// Inputs 0 .. n-1 float scalars.
InferFn scalars_infer(int n) {
  return [n](const InferContext& c) {
    for (int i = 0; i < n; ++i) {
      c.expect_dtype(i, DType::kF32);
      c.expect_rank(i, 0);
    }
    return scalar_f32();
  };
}

TensorSpec mul_scalar_infer(const InferContext& c) {
  c.expect_dtype(0, DType::kF32);
  c.expect_dtype(1, DType::kF32);
  c.expect_rank(1, 0);
  return c.input(0);
}

}  // namespace

void define_loss_scale_ops() {
  register_op({.name = "AllFinite", .num_inputs = -1, .infer = all_finite_infer});
  register_op({.name = "LossScaleFactor", .num_inputs = 2, .infer = scalars_infer(2), .may_skip = true});
  register_op({.name = "MulScalar", .num_inputs = 2, .infer = mul_scalar_infer, .grad = [](GradBuilder& g) {
                 return std::vector<Output>{g.op("MulScalar", {g.dy(), g.x(1)}), Output{}};
               }});
  register_op({.name = "UpdateLossScale", .num_inputs = 1, .infer = [](const InferContext& c) {
                 c.expect_dtype(0, DType::kF32);
                 c.expect_rank(0, 0);
                 if (c.attrs().i("growth_steps") < 1) c.fail("growth_steps must be at least 1");
                 return scalar_f32();
               }});
}

}  // namespace tctl
