// Optimizer updates and the gradient clipping that feeds them. An update writes its variables (the weight
// and its slots) in place; its inputs are the gradient, the learning rate (a float scalar) and for Adam the
// number of steps completed before this one (a float scalar), and its output is unused. Increment adds its
// "amount" to a variable (the step counter). GlobalNorm is the norm of all its inputs together;
// ClipByGlobalNorm(gradient, norm) scales a gradient by min(1, clipnorm / norm).
// AccumulateGradient(gradient, share, keep) sums a gradient into its accumulator (gradient accumulation):
// acc = share * g, or with keep != 0 acc + share * g. MovingAverage(value, steps_done) moves a weight's
// exponential average toward its value (optimizer "use_ema"): avg = m avg + (1 - m) value, m the
// "momentum" attribute, or 0 while steps_done is 0 (the first update starts the average at the value).
#include "core/ops/ops.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/op_registry.h"

namespace tctl {
namespace {

// Inputs: gradient (float, any shape), learning rate (float scalar), then `extra` float scalars.
InferFn update_infer(int extra = 0) {
  return [extra](const InferContext& c) {
    for (int i = 0; i < 2 + extra; ++i) c.expect_dtype(i, DType::kF32);
    for (int i = 1; i < 2 + extra; ++i) c.expect_rank(i, 0);
    return TensorSpec{DType::kF32, Shape{}};
  };
}

// FusedUpdate: the update op named by the string attribute "update" (ApplySgd, ApplyMomentum, ApplyAdam,
// ApplyRmsProp, ApplyAdagrad, with that op's attributes) for "variables" of them at once: inputs the k
// gradients, then that op's scalars (the learning rate; Adam's steps done); variables k runs of that op's
// (each weight, then its slots). One kernel instead of k: on a GPU, one launch instead of k, each with the
// stream's fixed cost (the optimizer fuses where a device has the kernel: models/train/optimizer.cpp).
TensorSpec fused_update_infer(const InferContext& c) {
  static const std::vector<std::string> updates{"ApplySgd", "ApplyMomentum", "ApplyAdam", "ApplyRmsProp",
                                                "ApplyAdagrad"};
  const std::string& update = c.attrs().s("update");
  if (std::find(updates.begin(), updates.end(), update) == updates.end())
    c.fail("update must be one of ApplySgd, ApplyMomentum, ApplyAdam, ApplyRmsProp, ApplyAdagrad, not " + update);
  const std::int64_t count = c.attrs().i("variables");
  const int scalars = op_def(update).num_inputs - 1;  // that op's inputs after its gradient
  if (count < 1 || count + scalars != c.num_inputs())
    c.fail("takes its " + std::to_string(count) + " gradients and " + std::to_string(scalars) + " scalars, given " +
           std::to_string(c.num_inputs()) + " inputs");
  for (int i = 0; i < c.num_inputs(); ++i) c.expect_dtype(i, DType::kF32);
  for (int i = static_cast<int>(count); i < c.num_inputs(); ++i) c.expect_rank(i, 0);
  return TensorSpec{DType::kF32, Shape{}};
}

TensorSpec global_norm_infer(const InferContext& c) {
  if (c.num_inputs() == 0) c.fail("needs at least one gradient");
  for (int i = 0; i < c.num_inputs(); ++i) c.expect_dtype(i, DType::kF32);
  return {DType::kF32, Shape{}};
}

TensorSpec clip_infer(const InferContext& c) {
  c.expect_dtype(0, DType::kF32);
  c.expect_dtype(1, DType::kF32);
  c.expect_rank(1, 0);
  if (!(c.attrs().f("clipnorm") > 0.0)) c.fail("clipnorm must be positive");
  return c.input(0);
}

}  // namespace

void define_optimizers_ops() {
  register_op({.name = "ApplySgd", .num_inputs = 2, .infer = update_infer()});
  register_op({.name = "ApplyMomentum", .num_inputs = 2, .infer = update_infer()});
  register_op({.name = "ApplyAdam", .num_inputs = 3, .infer = update_infer(1)});
  register_op({.name = "ApplyRmsProp", .num_inputs = 2, .infer = update_infer()});
  register_op({.name = "ApplyAdagrad", .num_inputs = 2, .infer = update_infer()});
  register_op({.name = "FusedUpdate", .num_inputs = -1, .infer = fused_update_infer});
  // Increment and MovingAverage take an optional last input they do not read: dynamic loss scaling's factor,
  // which is dead on a skipped step (core/ops/loss_scale.cpp), so they are skipped with the updates.
  register_op({.name = "Increment", .num_inputs = -1, .infer = [](const InferContext& c) {
                 if (c.num_inputs() > 1) c.fail("takes at most one input (a gate)");
                 return TensorSpec{DType::kF32, Shape{}};
               }});
  register_op({.name = "AccumulateGradient", .num_inputs = 3, .infer = update_infer(1)});
  register_op({.name = "MovingAverage", .num_inputs = -1, .infer = [](const InferContext& c) {
                 if (c.num_inputs() < 2 || c.num_inputs() > 3) c.fail("takes a value, the steps done and a gate");
                 c.expect_dtype(0, DType::kF32);
                 c.expect_dtype(1, DType::kF32);
                 c.expect_rank(1, 0);
                 const double m = c.attrs().f("momentum");
                 if (!(m >= 0.0 && m < 1.0)) c.fail("momentum must lie in [0, 1)");
                 return TensorSpec{DType::kF32, Shape{}};
               }});
  register_op({.name = "GlobalNorm", .num_inputs = -1, .infer = global_norm_infer});
  register_op({.name = "ClipByGlobalNorm", .num_inputs = 2, .infer = clip_infer});
}

}  // namespace tctl
