// Per-example losses and their gradients: fused softmax cross-entropy (sparse int labels or one-hot), binary
// cross-entropy on probabilities, mean squared error, mean absolute error and Huber. Each takes
// (predictions or logits, labels or targets) and returns a [N] vector; the mean over the batch is a Mean op
// after it. The gradient ops take (logits, labels, dy) and return the logits' gradient; the labels get none.
// ClassWeight(targets, weights) is each row's class weight (the config's class_weight): weights[label] for
// int labels, the targets' dot product with the weights for one-hot rows, and w0 (1 - y) + w1 y for binary
// targets (two weights); a label outside the weights weighs 0 (the loss op reports it). It has no gradient.
#include "core/ops/ops.h"

#include "core/autodiff.h"

namespace tctl {
namespace {

TensorSpec sparse_xent_infer(const InferContext& c) {
  c.expect_rank(0, 2);
  c.expect_rank(1, 1);
  c.expect_dtype(1, DType::kI32);
  if (!Shape{c.shape(0)[0]}.compatible(c.shape(1)))
    c.fail("logits " + c.shape(0).to_string() + " and labels " + c.shape(1).to_string() + " differ in batch size");
  return {DType::kF32, Shape{c.shape(0)[0]}};
}

TensorSpec dense_xent_infer(const InferContext& c) {
  c.expect_rank(0, 2);
  if (!c.shape(1).compatible(c.shape(0)))
    c.fail("logits " + c.shape(0).to_string() + " and targets " + c.shape(1).to_string() + " differ");
  return {DType::kF32, Shape{c.shape(0)[0]}};
}

TensorSpec mse_infer(const InferContext& c) {
  if (c.shape(0).rank() < 1) c.fail("predictions need a batch dimension");
  if (!c.shape(1).compatible(c.shape(0)))
    c.fail("predictions " + c.shape(0).to_string() + " and targets " + c.shape(1).to_string() + " differ");
  return {DType::kF32, Shape{c.shape(0)[0]}};
}

TensorSpec grad_like_logits(const InferContext& c) { return c.input(0); }

// Whether a loss's gradient op gets the loss's attributes (delta, epsilon).
enum class GradAttrs { kNone, kSame };

// The loss `name` on (predictions, targets), and its gradient op `grad_name` on (predictions, targets, dy);
// the targets get no gradient.
void define_loss(std::string name, std::string grad_name, InferFn infer, GradAttrs grad_attrs) {
  register_op({.name = std::move(name),
               .num_inputs = 2,
               .infer = std::move(infer),
               .grad = [grad_name, grad_attrs](GradBuilder& g) {
                 const Attrs attrs = grad_attrs == GradAttrs::kSame ? g.attrs() : Attrs{};
                 return std::vector<Output>{g.op(grad_name, {g.x(0), g.x(1), g.dy()}, attrs), Output{}};
               }});
  register_op({.name = std::move(grad_name), .num_inputs = 3, .infer = grad_like_logits});
}

TensorSpec class_weight_infer(const InferContext& c) {
  c.expect_dtype(1, DType::kF32);
  c.expect_rank(1, 1);
  const Shape& t = c.shape(0);
  const std::int64_t classes = c.shape(1)[0];
  if (t.rank() < 1) c.fail("targets need a batch dimension");
  if (c.input(0).dtype == DType::kI32) {
    c.expect_rank(0, 1);
  } else {
    c.expect_dtype(0, DType::kF32);
    const std::int64_t width = t.rank() == 1 ? 1 : t[t.rank() - 1];
    if (t.rank() > 2 || !(width == classes || (width == 1 && classes == 2)))
      c.fail("targets " + t.to_string() + " do not match " + std::to_string(classes) + " class weights");
  }
  return {DType::kF32, Shape{t[0]}};
}

}  // namespace

void define_losses_ops() {
  register_op({.name = "ClassWeight", .num_inputs = 2, .infer = class_weight_infer, .grad = [](GradBuilder&) {
                 return std::vector<Output>{Output{}, Output{}};
               }});
  define_loss("SparseSoftmaxXent", "SparseSoftmaxXentGrad", sparse_xent_infer, GradAttrs::kNone);
  define_loss("SoftmaxXent", "SoftmaxXentGrad", dense_xent_infer, GradAttrs::kNone);
  define_loss("Mse", "MseGrad", mse_infer, GradAttrs::kNone);
  define_loss("Mae", "MaeGrad", mse_infer, GradAttrs::kNone);
  define_loss("Huber", "HuberGrad", mse_infer, GradAttrs::kSame);
  define_loss("BinaryXent", "BinaryXentGrad", mse_infer, GradAttrs::kSame);
}

}  // namespace tctl
