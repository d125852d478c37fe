// MatMul on OpenBLAS sgemm, with transposes for the gradients.
#include <cblas.h>

#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {
namespace {

// The output is cut into tiles of at most kTile x kTile, one sgemm call each. The cut depends only on the
// shapes, never on the thread count, so every element is computed by the same call whether 1 or 8 threads
// run the tiles: results stay bit-identical. Tiles this large keep sgemm within 1-2% of one whole call
// (64-row blocks cost 8-12%: B was packed again for every block), and a 128x512 product still has two
// tiles for two threads.
constexpr std::int64_t kTile = 256;

// OpenBLAS keeps its own thread pool; tensorctl's intra-op pool owns the cores instead, so OpenBLAS runs
// single-threaded inside each of our threads and two pools never fight over two cores.
[[maybe_unused]] const bool kOpenblasSingleThreaded = [] {
  openblas_set_num_threads(1);
  return true;
}();

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
    c.fail("cannot multiply " + c.shape(0).to_string() + " by " + c.shape(1).to_string() +
           ": inner dimensions " + std::to_string(ka) + " and " + std::to_string(kb) + " differ");
  return {DType::kF32, Shape{m, n}};
}

void matmul_cpu(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  bool ta = ctx.attrs().i_or("transpose_a", 0) != 0;
  bool tb = ctx.attrs().i_or("transpose_b", 0) != 0;
  Tensor& y = ctx.output();
  const std::int64_t m = y.shape()[0], n = y.shape()[1];
  const std::int64_t k = a.shape()[ta ? 0 : 1];
  const std::int64_t lda = a.shape()[1], ldb = b.shape()[1];
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* py = y.mutable_data<float>();
  const std::int64_t row_tiles = (m + kTile - 1) / kTile, col_tiles = (n + kTile - 1) / kTile;
  ctx.parallel_for(row_tiles * col_tiles, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t row = t / col_tiles * kTile, col = t % col_tiles * kTile;
      const std::int64_t rows = std::min(kTile, m - row), cols = std::min(kTile, n - col);
      // Row `row` of op(A) starts at A[row, 0], or at column `row` of A when A is transposed; column `col`
      // of op(B) starts at B[0, col], or at row `col` of B when B is transposed.
      const float* a_tile = ta ? pa + row : pa + row * lda;
      const float* b_tile = tb ? pb + col * ldb : pb + col;
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                  static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(k), 1.0f, a_tile,
                  static_cast<int>(lda), b_tile, static_cast<int>(ldb), 0.0f, py + row * n + col, static_cast<int>(n));
    }
  });
}

Output matmul(GradBuilder& g, Output a, Output b, bool ta, bool tb) {
  return g.op("MatMul", {a, b}, Attrs{{"transpose_a", std::int64_t{ta}}, {"transpose_b", std::int64_t{tb}}});
}

std::vector<Output> matmul_grad(GradBuilder& g) {
  bool ta = g.attrs().i_or("transpose_a", 0) != 0;
  bool tb = g.attrs().i_or("transpose_b", 0) != 0;
  Output a = g.x(0), b = g.x(1), dy = g.dy();
  // Each product only when its input needs a gradient: the first layer's input gradient is dead work.
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

}  // namespace

TCTL_REGISTER_OP({.name = "MatMul", .num_inputs = 2, .infer = matmul_infer, .grad = matmul_grad, .cpu = matmul_cpu});

}  // namespace tctl::cpu
