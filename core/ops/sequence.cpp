// The ops of sequence models on float32 [batch, steps, channels] inputs (channels last, as Keras):
//   GlobalAvgPool, GlobalMaxPool   [N, S, C] -> [N, C], the mean or the maximum over the steps (a 2-D
//                                  input's pixels are its steps, reshaped by the layer); their gradients take
//                                  (dy, x), and the max's goes to the first step holding the maximum.
//   Embedding                      (table [V, D], ids [N, ...]) -> [N, ..., D], row ids[i] of the table for
//                                  each id, the ids whole numbers in [0, V) held as floats (the features a
//                                  CSV gives); the ids get no gradient, the table EmbeddingGrad (dy, ids,
//                                  table), the rows of dy summed into the rows they were read from.
#include "core/ops/ops.h"

#include <span>
#include <vector>

#include "core/autodiff.h"

namespace tctl {
namespace {

TensorSpec global_pool_infer(const InferContext& c) {
  c.expect_rank(0, 3);
  c.expect_dtype(0, DType::kF32);
  return {DType::kF32, Shape{c.shape(0)[0], c.shape(0)[2]}};
}

TensorSpec like_second(const InferContext& c) { return c.input(1); }

// One operation per input element, as the 2-D pools count the elements their windows cover.
std::int64_t global_pool_flops(std::span<const TensorSpec> inputs, const TensorSpec&, const Attrs&) {
  return cost_elements(inputs[0].shape);
}
std::int64_t global_pool_grad_flops(std::span<const TensorSpec> inputs, const TensorSpec&, const Attrs&) {
  return cost_elements(inputs[1].shape);
}

TensorSpec embedding_infer(const InferContext& c) {
  c.expect_rank(0, 2);
  c.expect_dtype(0, DType::kF32);
  c.expect_dtype(1, DType::kF32);
  if (c.shape(1).rank() < 1) c.fail("the ids need a batch dimension");
  std::vector<std::int64_t> dims(c.shape(1).dims().begin(), c.shape(1).dims().end());
  dims.push_back(c.shape(0)[1]);
  return {DType::kF32, Shape(std::span<const std::int64_t>(dims))};
}

TensorSpec embedding_grad_infer(const InferContext& c) { return c.input(2); }

}  // namespace

void define_sequence_ops() {
  register_op({.name = "GlobalAvgPool",
               .infer = global_pool_infer,
               .grad =
                   [](GradBuilder& g) {
                     return std::vector<Output>{g.op("GlobalAvgPoolGrad", {g.dy(), g.x(0)})};
                   },
               .flops = global_pool_flops});
  register_op({.name = "GlobalAvgPoolGrad", .num_inputs = 2, .infer = like_second, .flops = global_pool_grad_flops});
  register_op({.name = "GlobalMaxPool",
               .infer = global_pool_infer,
               .grad =
                   [](GradBuilder& g) {
                     return std::vector<Output>{g.op("GlobalMaxPoolGrad", {g.dy(), g.x(0)})};
                   },
               .flops = global_pool_flops});
  register_op({.name = "GlobalMaxPoolGrad", .num_inputs = 2, .infer = like_second, .flops = global_pool_grad_flops});
  register_op(
      {.name = "Embedding", .num_inputs = 2, .infer = embedding_infer, .grad = [](GradBuilder& g) {
         return std::vector<Output>{g.needs(0) ? g.op("EmbeddingGrad", {g.dy(), g.x(1), g.x(0)}) : Output{}, Output{}};
       }});
  register_op({.name = "EmbeddingGrad", .num_inputs = 3, .infer = embedding_grad_infer});
}

}  // namespace tctl
