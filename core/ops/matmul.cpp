// MatMul (attributes transpose_a, transpose_b), with transposed products for its gradients, and
// FusedMatMul(x, W, b): activation(x W + b), a Dense layer's product, bias and activation in one node.
#include "core/ops/ops.h"

#include "core/autodiff.h"
#include "core/ops/fused.h"

namespace tctl {
namespace {

TensorSpec matmul_infer(const InferContext& c) {
  c.expect_rank(0, 2);
  c.expect_rank(1, 2);
  c.expect_dtype(0, DType::kF32);
  c.expect_dtype(1, DType::kF32);
  bool ta = c.attrs().i_or("transpose_a", 0) != 0;
  bool tb = c.attrs().i_or("transpose_b", 0) != 0;
  std::int64_t m = c.shape(0)[ta ? 1 : 0], ka = c.shape(0)[ta ? 0 : 1];
  std::int64_t kb = c.shape(1)[tb ? 1 : 0], n = c.shape(1)[tb ? 0 : 1];
  if (ka >= 0 && kb >= 0 && ka != kb)
    c.fail("cannot multiply " + c.shape(0).to_string() + " by " + c.shape(1).to_string() + ": inner dimensions " +
           std::to_string(ka) + " and " + std::to_string(kb) + " differ");
  return {DType::kF32, Shape{m, n}};
}

// Multiply-adds: each output element sums over the shared dimension (known from either operand).
std::int64_t matmul_cost(std::span<const TensorSpec> inputs, const TensorSpec& output, const Attrs& attrs) {
  const std::int64_t ka = inputs[0].shape[attrs.i_or("transpose_a", 0) != 0 ? 0 : 1];
  const std::int64_t kb = inputs[1].shape[attrs.i_or("transpose_b", 0) != 0 ? 1 : 0];
  return cost_product(cost_elements(output.shape), ka >= 0 ? ka : kb);
}

// The profiler's count: a multiply-add is two operations.
std::int64_t matmul_flops(std::span<const TensorSpec> inputs, const TensorSpec& output, const Attrs& attrs) {
  return cost_product(2, matmul_cost(inputs, output, attrs));
}

Output matmul(GradBuilder& g, Output a, Output b, bool ta, bool tb) {
  return g.op("MatMul", {a, b}, Attrs{{"transpose_a", std::int64_t{ta}}, {"transpose_b", std::int64_t{tb}}});
}

// The gradients of op(a) op(b), a and b the node's inputs, for the output gradient dy: each product only
// when its input needs a gradient (the first layer's input gradient is dead work).
std::vector<Output> product_grads(GradBuilder& g, Output dy, bool ta, bool tb) {
  const Output a = g.x(0), b = g.x(1);
  auto da = [&] {
    if (!g.needs(0)) return Output{};
    if (!ta) return matmul(g, dy, b, false, !tb);
    return tb ? matmul(g, b, dy, true, true) : matmul(g, b, dy, false, true);
  };
  auto db = [&] {
    if (!g.needs(1)) return Output{};
    if (!tb) return matmul(g, a, dy, !ta, false);
    return ta ? matmul(g, dy, a, true, true) : matmul(g, dy, a, true, false);
  };
  Output dx0 = da();
  return {dx0, db()};
}

std::vector<Output> matmul_grad(GradBuilder& g) {
  return product_grads(g, g.dy(), g.attrs().i_or("transpose_a", 0) != 0, g.attrs().i_or("transpose_b", 0) != 0);
}

std::vector<Output> fused_matmul_grad(GradBuilder& g) {
  return fused_grads(g, [&](Output dz) { return product_grads(g, dz, false, false); });
}

}  // namespace

void define_matmul_ops() {
  register_op({.name = "MatMul",
               .num_inputs = 2,
               .infer = matmul_infer,
               .grad = matmul_grad,
               .cost = matmul_cost,
               .flops = matmul_flops});
  register_op({.name = "FusedMatMul",
               .num_inputs = 3,
               .infer = fused_infer(matmul_infer, "columns of the product"),
               .grad = fused_matmul_grad,
               .cost = matmul_cost,
               .flops = matmul_flops});
}

}  // namespace tctl
