// MatMul (attributes transpose_a, transpose_b), with transposed products for its gradients, and
// FusedMatMul(x, W, b): activation(x W + b), a Dense layer's product, bias and activation in one node.
#include "core/ops/ops.h"

#include "core/autodiff.h"
#include "core/ops/fused.h"

namespace tctl {
namespace {

// Operands of rank 2, or above: a [N, T, F] operand is the matrix of its N T rows (matrix_dims), and the
// product of such an `a` (not transposed) keeps its leading dimensions, [N, T, F] x [F, M] -> [N, T, M]: a
// Dense layer over every step of a sequence in one product, and its gradients.
TensorSpec matmul_infer(const InferContext& c) {
  for (int i = 0; i < 2; ++i) {
    if (c.shape(i).rank() < 2) c.fail("input " + std::to_string(i) + " " + c.shape(i).to_string() + " is not a matrix");
    c.expect_dtype(i, DType::kF32);
  }
  bool ta = c.attrs().i_or("transpose_a", 0) != 0;
  bool tb = c.attrs().i_or("transpose_b", 0) != 0;
  if (tb && c.shape(1).rank() > 2) c.fail("a transposed second input must be a matrix, got " + c.shape(1).to_string());
  const MatrixDims a = matrix_dims(c.shape(0)), b = matrix_dims(c.shape(1));
  std::int64_t m = ta ? a.cols : a.rows, ka = ta ? a.rows : a.cols;
  std::int64_t kb = tb ? b.cols : b.rows, n = tb ? b.rows : b.cols;
  if (ka >= 0 && kb >= 0 && ka != kb)
    c.fail("cannot multiply " + c.shape(0).to_string() + " by " + c.shape(1).to_string() + ": inner dimensions " +
           std::to_string(ka) + " and " + std::to_string(kb) + " differ");
  if (ta || c.shape(0).rank() == 2) return {DType::kF32, Shape{m, n}};
  Shape out = c.shape(0);
  out.set_dim(out.rank() - 1, n);
  return {DType::kF32, out};
}

// Multiply-adds: each output element sums over the shared dimension (known from either operand).
std::int64_t matmul_cost(std::span<const TensorSpec> inputs, const TensorSpec& output, const Attrs& attrs) {
  const MatrixDims a = matrix_dims(inputs[0].shape), b = matrix_dims(inputs[1].shape);
  const std::int64_t ka = attrs.i_or("transpose_a", 0) != 0 ? a.rows : a.cols;
  const std::int64_t kb = attrs.i_or("transpose_b", 0) != 0 ? b.cols : b.rows;
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
               .flops = matmul_flops,
               .products = true});
  register_op({.name = "FusedMatMul",
               .num_inputs = 3,
               .infer = fused_infer(matmul_infer, "columns of the product"),
               .grad = fused_matmul_grad,
               .cost = matmul_cost,
               .flops = matmul_flops,
               .products = true});
}

}  // namespace tctl
