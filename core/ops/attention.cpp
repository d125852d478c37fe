// SelfAttention: Keras' MultiHeadAttention between its projections, for a sequence attending to itself.
//   SelfAttention      (qkv [N, T, 3 D][, mask [N, T]]) -> [N, T, D]; attributes heads, causal. qkv holds the
//                      queries, keys and values side by side (one MatMul by their three kernels), each head h
//                      their columns [h d, (h + 1) d) for d = D / heads. Per example and head:
//                      softmax(Q K^T / sqrt(d) + A) V, with A -1e9 where Keras' mask excludes a pair: the key a
//                      padding step or the query one (mask 0), or with causal the key after the query.
//                      Attributes dropout (a rate, in training) and stream: the weights softmax(...) are
//                      dropped before they multiply V, from a counter-based stream the gradient replays.
//   SelfAttentionGrad  (dy, qkv[, mask]) -> d qkv, recomputing the softmax from qkv.
#include <span>
#include <vector>

#include "core/autodiff.h"
#include "core/ops/ops.h"

namespace tctl {
namespace {

TensorSpec attention_infer(const InferContext& c) {
  if (c.num_inputs() != 1 && c.num_inputs() != 2) c.fail("SelfAttention takes qkv and an optional mask");
  c.expect_rank(0, 3);
  c.expect_dtype(0, DType::kF32);
  const Shape& qkv = c.shape(0);
  const std::int64_t heads = c.attrs().i("heads");
  if (qkv[2] % 3 != 0 || heads < 1 || (qkv[2] / 3) % heads != 0)
    c.fail("qkv " + qkv.to_string() + " is not 3 x heads x a head's width, heads " + std::to_string(heads));
  if (c.num_inputs() == 2) {
    c.expect_rank(1, 2);
    if (c.shape(1)[1] != qkv[1]) c.fail("mask " + c.shape(1).to_string() + " does not fit " + qkv.to_string());
  }
  const double rate = c.attrs().f_or("dropout", 0.0);
  if (!(rate >= 0.0 && rate < 1.0)) c.fail("dropout " + std::to_string(rate) + " is not in [0, 1)");
  return {DType::kF32, Shape{qkv[0], qkv[1], qkv[2] / 3}};
}

TensorSpec attention_grad_infer(const InferContext& c) { return c.input(1); }

std::vector<Output> attention_grad(GradBuilder& g) { return masked_op_grad(g, "SelfAttentionGrad", g.attrs()); }

// Q K^T and P V, 2 N T T D multiply-adds (the qkv input is the gradient's second).
std::int64_t attention_cost(std::span<const TensorSpec> in, const TensorSpec&, const Attrs&) {
  const Shape& s = in[in.size() == 3 ? 1 : 0].shape;
  return cost_product(cost_product(2, cost_elements(Shape{s[0], s[1], s[1]})), s[2] / 3);
}
std::int64_t attention_flops(std::span<const TensorSpec> in, const TensorSpec& out, const Attrs& a) {
  return cost_product(2, attention_cost(in, out, a));
}

}  // namespace

void define_attention_ops() {
  register_op({.name = "SelfAttention",
               .num_inputs = -1,
               .infer = attention_infer,
               .grad = attention_grad,
               .cost = attention_cost,
               .flops = attention_flops,
               .products = true});
  register_op({.name = "SelfAttentionGrad",
               .num_inputs = -1,
               .infer = attention_grad_infer,
               .cost =
                   [](std::span<const TensorSpec> in, const TensorSpec& out, const Attrs& a) {
                     return cost_product(3, attention_cost(in, out, a));  // Q K^T again, then four products
                   },
               .products = true});
}

}  // namespace tctl
