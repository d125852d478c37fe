// The ops of sequence models on float32 [batch, steps, channels] inputs (channels last, as Keras):
//   GlobalAvgPool, GlobalMaxPool   [N, S, C][, mask [N, S]] -> [N, C], the mean or the maximum over the
//                                  steps (a 2-D input's pixels are its steps, reshaped by the layer), with a
//                                  mask over the steps it holds 1 for (an all-padding row gives zeros); their
//                                  gradients take (dy, x[, mask]), and the max's goes to the first step
//                                  holding the maximum.
//   TokenMask                      ids [N, S] -> [N, S]: 1 where the id is not 0, the padding mask of an
//                                  Embedding with mask_zero (Keras' masking); no gradient.
//   Embedding                      (table [V, D], ids [N, ...]) -> [N, ..., D], row ids[i] of the table for
//                                  each id, the ids whole numbers in [0, V) held as floats (the features a
//                                  CSV gives); the ids get no gradient, the table EmbeddingGrad (dy, ids,
//                                  table), the rows of dy summed into the rows they were read from.
//   EmbeddingMatMul                (table [V, D], ids [N, ...], W [D, C]) -> [N, ..., C]: Embedding then
//                                  MatMul in one node, each distinct id's row multiplied once, so a batch
//                                  that repeats ids (text does) costs less. Its gradients share
//                                  EmbeddingRowSums (dy, ids, table), dy's rows summed per distinct id in the
//                                  order the ids first appear, left in its first rows (the rest zero); from
//                                  them EmbeddingMatMulTableGrad (sums, ids, W, table), the table's gradient
//                                  (each distinct id's row sums W^T), and EmbeddingMatMulKernelGrad (sums,
//                                  ids, table), W's (the distinct ids' rows, transposed, times their sums).
//                                  The same products as the two nodes apart, on fewer rows.
//   PositionEmbedding              (x [N, L, D], table [S, D]), L <= S: x plus row l of the table at each
//                                  step l, the same for every example; the table's gradient,
//                                  PositionEmbeddingGrad (dy, table), is dy summed over the batch (rows from
//                                  L on zero), and x's is dy.
//   LayerNorm                      (x [..., D], gamma [D], beta [D]), attribute epsilon: each row of D
//                                  normalized by its own mean and variance, gamma (x - mean) /
//                                  sqrt(variance + epsilon) + beta. LayerNormGrad takes (dy, x, gamma) and
//                                  its attribute "wrt" picks 0 x or 1 gamma; beta's gradient is BiasAddGrad.
#include "core/ops/ops.h"

#include <span>
#include <vector>

#include "core/autodiff.h"

namespace tctl {
namespace {

// The optional mask input `i` of a pool over x [N, S, C]: [N, S].
void check_global_pool_mask(const InferContext& c, int i) {
  if (c.num_inputs() > i + 1) c.fail("too many inputs");
  if (c.num_inputs() <= i) return;
  c.expect_rank(i, 2);
  const Shape& x = c.shape(i == 1 ? 0 : 1);
  if (c.shape(i)[1] != x[1]) c.fail("mask " + c.shape(i).to_string() + " does not fit " + x.to_string());
}

TensorSpec global_pool_infer(const InferContext& c) {
  c.expect_rank(0, 3);
  c.expect_dtype(0, DType::kF32);
  check_global_pool_mask(c, 1);
  return {DType::kF32, Shape{c.shape(0)[0], c.shape(0)[2]}};
}

TensorSpec like_input(const InferContext& c) { return c.input(1); }

TensorSpec global_pool_grad_infer(const InferContext& c) {
  check_global_pool_mask(c, 2);
  return c.input(1);
}

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

TensorSpec embedding_matmul_infer(const InferContext& c) {
  TensorSpec rows = embedding_infer(c);
  c.expect_rank(2, 2);
  c.expect_dtype(2, DType::kF32);
  const std::int64_t width = c.shape(0)[1], depth = c.shape(2)[0];
  if (width >= 0 && depth >= 0 && width != depth)
    c.fail("a table of " + c.shape(0).to_string() + " cannot be multiplied by " + c.shape(2).to_string());
  rows.shape.set_dim(rows.shape.rank() - 1, c.shape(2)[1]);
  return rows;
}

// Multiply-adds and operations as MatMul counts them for the product over every id, so the profiler's FLOPs
// are those of Embedding and MatMul apart, as TensorFlow's profiler would count the layer.
std::int64_t embedding_matmul_cost(std::span<const TensorSpec> inputs, const TensorSpec&, const Attrs&) {
  const Shape& table = inputs[0].shape;
  return cost_product(cost_elements(inputs[1].shape), cost_product(table[1], inputs[2].shape[1]));
}
std::int64_t embedding_matmul_flops(std::span<const TensorSpec> inputs, const TensorSpec& out, const Attrs& a) {
  return cost_product(2, embedding_matmul_cost(inputs, out, a));
}
// The gradients' inputs are (sums [N, ..., C], ids, ...): the same count from the sums' shape.
std::int64_t embedding_matmul_grad_cost(std::span<const TensorSpec> inputs, const TensorSpec&, const Attrs&) {
  const Shape& sums = inputs[0].shape;
  const Shape& table = inputs.back().shape;
  return cost_product(cost_elements(inputs[1].shape), cost_product(table[1], sums[sums.rank() - 1]));
}
std::int64_t embedding_matmul_grad_flops(std::span<const TensorSpec> inputs, const TensorSpec& out, const Attrs& a) {
  return cost_product(2, embedding_matmul_grad_cost(inputs, out, a));
}

std::vector<Output> embedding_matmul_grad(GradBuilder& g) {
  if (!g.needs(0) && !g.needs(2)) return {Output{}, Output{}, Output{}};
  const Output sums = g.op("EmbeddingRowSums", {g.dy(), g.x(1), g.x(0)});
  return {g.needs(0) ? g.op("EmbeddingMatMulTableGrad", {sums, g.x(1), g.x(2), g.x(0)}) : Output{}, Output{},
          g.needs(2) ? g.op("EmbeddingMatMulKernelGrad", {sums, g.x(1), g.x(0)}) : Output{}};
}

TensorSpec position_embedding_infer(const InferContext& c) {
  c.expect_rank(0, 3);
  c.expect_rank(1, 2);
  c.expect_dtype(0, DType::kF32);
  c.expect_dtype(1, DType::kF32);
  const Shape& x = c.shape(0);
  const Shape& table = c.shape(1);
  if (x[2] != table[1] || (x[1] >= 0 && x[1] > table[0]))
    c.fail("input " + x.to_string() + " does not fit a position table of " + table.to_string());
  return c.input(0);
}

TensorSpec layer_norm_infer(const InferContext& c) {
  c.expect_dtype(0, DType::kF32);
  if (c.shape(0).rank() < 2) c.fail("input must have a batch and a feature dimension, got " + c.shape(0).to_string());
  const std::int64_t features = c.shape(0)[c.shape(0).rank() - 1];
  for (int i = 1; i < 3; ++i) {
    c.expect_dtype(i, DType::kF32);
    if (!(c.shape(i) == Shape{features}))
      c.fail("input " + std::to_string(i) + " has shape " + c.shape(i).to_string() + " but the input " +
             c.shape(0).to_string() + " has " + std::to_string(features) + " features");
  }
  return c.input(0);
}

TensorSpec layer_norm_grad_infer(const InferContext& c) { return c.attrs().i("wrt") == 0 ? c.input(1) : c.input(2); }

std::vector<Output> layer_norm_grad(GradBuilder& g) {
  std::vector<Output> grads;
  for (std::int64_t wrt = 0; wrt < 2; ++wrt)
    grads.push_back(g.needs(static_cast<int>(wrt)) ? g.op("LayerNormGrad", {g.dy(), g.x(0), g.x(1)},
                                                          Attrs{{"epsilon", g.attrs().f("epsilon")}, {"wrt", wrt}})
                                                   : Output{});
  grads.push_back(g.needs(2) ? g.op("BiasAddGrad", {g.dy()}) : Output{});
  return grads;
}

}  // namespace

void define_sequence_ops() {
  register_op({.name = "GlobalAvgPool",
               .num_inputs = -1,
               .infer = global_pool_infer,
               .grad = [](GradBuilder& g) { return masked_op_grad(g, "GlobalAvgPoolGrad"); },
               .flops = global_pool_flops});
  register_op({.name = "GlobalAvgPoolGrad",
               .num_inputs = -1,
               .infer = global_pool_grad_infer,
               .flops = global_pool_grad_flops});
  register_op({.name = "GlobalMaxPool",
               .num_inputs = -1,
               .infer = global_pool_infer,
               .grad = [](GradBuilder& g) { return masked_op_grad(g, "GlobalMaxPoolGrad"); },
               .flops = global_pool_flops});
  register_op({.name = "GlobalMaxPoolGrad",
               .num_inputs = -1,
               .infer = global_pool_grad_infer,
               .flops = global_pool_grad_flops});
  register_op({.name = "TokenMask", .infer = [](const InferContext& c) {
                 c.expect_rank(0, 2);
                 c.expect_dtype(0, DType::kF32);
                 return c.input(0);
               }});
  register_op(
      {.name = "Embedding", .num_inputs = 2, .infer = embedding_infer, .grad = [](GradBuilder& g) {
         return std::vector<Output>{g.needs(0) ? g.op("EmbeddingGrad", {g.dy(), g.x(1), g.x(0)}) : Output{}, Output{}};
       }});
  register_op({.name = "EmbeddingGrad", .num_inputs = 3, .infer = embedding_grad_infer});
  register_op({.name = "EmbeddingMatMul",
               .num_inputs = 3,
               .infer = embedding_matmul_infer,
               .grad = embedding_matmul_grad,
               .cost = embedding_matmul_cost,
               .flops = embedding_matmul_flops});
  register_op({.name = "EmbeddingRowSums", .num_inputs = 3, .infer = same_as_input(0)});
  register_op({.name = "EmbeddingMatMulTableGrad",
               .num_inputs = 4,
               .infer = [](const InferContext& c) { return c.input(3); },
               .cost = embedding_matmul_grad_cost,
               .flops = embedding_matmul_grad_flops});
  register_op({.name = "EmbeddingMatMulKernelGrad",
               .num_inputs = 3,
               .infer =
                   [](const InferContext& c) {
                     const Shape& sums = c.shape(0);
                     return TensorSpec{DType::kF32, Shape{c.shape(2)[1], sums[sums.rank() - 1]}};
                   },
               .cost = embedding_matmul_grad_cost,
               .flops = embedding_matmul_grad_flops});
  register_op(
      {.name = "PositionEmbedding", .num_inputs = 2, .infer = position_embedding_infer, .grad = [](GradBuilder& g) {
         return std::vector<Output>{g.dy(), g.needs(1) ? g.op("PositionEmbeddingGrad", {g.dy(), g.x(1)}) : Output{}};
       }});
  register_op({.name = "PositionEmbeddingGrad", .num_inputs = 2, .infer = like_input});
  register_op({.name = "LayerNorm", .num_inputs = 3, .infer = layer_norm_infer, .grad = layer_norm_grad});
  register_op({.name = "LayerNormGrad", .num_inputs = 3, .infer = layer_norm_grad_infer});
}

}  // namespace tctl
