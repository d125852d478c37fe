// CPU kernels of MatMul on OpenBLAS sgemm, with transposes for the gradients, and of FusedMatMul: a Dense
// layer's product, bias and ReLU in one node (definitions in core/ops/matmul.cpp). Products small enough
// that sgemm's packing costs as much as its arithmetic go to small_product instead, and every tile does where
// its kernels are wider than OpenBLAS's (small_product.h, tile_in_place).
#include <cblas.h>

#include "core/ceil_div.h"
#include "core/compute_type.h"
#include "core/ops/fused.h"
#include "kernels/cpu/bf16_product.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/small_product.h"

namespace tctl::cpu {
namespace {

// The output is cut into tiles of at most about kTile x kTile, one sgemm call each. The cut depends only on
// the shapes, never on the thread count, so every element is computed by the same call whether 1 or 8
// threads run the tiles: results stay bit-identical. Every tile packs its operands again, so tiles are
// large (256-wide ones slowed the 784-512-512-10 MLP's step, whose 784x512 weight gradient was 8 calls). A
// product of at least kSplitWork multiply-adds still gets two tiles, for two threads: at 2^22 the digits
// MLP's products at batch 256 (2^21) stayed whole and its step ran slower on two threads than on one; at
// 2^20 one thread pays little for the second packing. But a product of at most kSmallProductWork that
// small_product takes whole with 16-float vectors stays whole (whole or cut, each output is the same one
// chain, so no bit moves): cut in two it gains nothing, and its halves of the output cost the ops reading
// them (ReluGrad, the update) the other core's cache. With 8-float vectors the product takes twice as long
// and the cut still pays. Measured by bench_workloads mlp784_b128 and mlp_digits_b256 at 1 and 2 threads
// (figures in bench/README.md, "Figures behind the constants in the code"). A dimension is cut into equal
// parts (to multiples of 16), and an odd number of tiles gets one more part, so two threads get the same work.
constexpr std::int64_t kTile = 512;
constexpr std::int64_t kSplitWork = std::int64_t{1} << 20;

// Where part i of `parts` equal parts of a dimension starts: at a multiple of 16, the last part ending at
// the dimension. A part is never empty while the dimension has at least 16 elements per part.
std::int64_t cut(std::int64_t dim, std::int64_t parts, std::int64_t i) {
  if (i >= parts) return dim;
  return std::min(dim, (dim * i / parts + 8) / 16 * 16);
}

// OpenBLAS keeps its own thread pool; tensorctl's intra-op pool owns the cores instead, so OpenBLAS runs
// single-threaded inside each of our threads and two pools never fight over two cores.
[[maybe_unused]] const bool kOpenblasSingleThreaded = [] {
  openblas_set_num_threads(1);
  return true;
}();

// y = op(A) op(B), tile by tile; `finish(row, col, rows, cols)` runs on each tile right after its sgemm, by
// the same thread, while the tile is still in cache. Under mixed_bfloat16, on a processor with AVX-512 BF16,
// every tile is a bfloat16 product (bf16_product.h) in the same tiles.
template <class Finish>
void multiply_tiles(const KernelContext& ctx, const Product& p, Finish finish) {
  const std::int64_t m = p.rows, n = p.cols, k = p.depth;
  std::int64_t row_tiles = ceil_div(m, kTile), col_tiles = ceil_div(n, kTile);
  const bool stays_whole = row_tiles * col_tiles == 1 && small_product_wide() && small_product_applies(m, n, k) &&
                           m * n * k <= kSmallProductWork;
  const bool split = row_tiles * col_tiles > 1 || (m * n * k >= kSplitWork && !stays_whole);
  if (row_tiles * col_tiles % 2 == 1 && split) (m >= n ? row_tiles : col_tiles) += 1;
  const bool bf16 = ctx.compute_type() == ComputeType::kBF16 && cpu_bf16_products();
  ctx.parallel_for(row_tiles * col_tiles, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t rt = t / col_tiles, ct = t % col_tiles;
      const std::int64_t row = cut(m, row_tiles, rt), col = cut(n, col_tiles, ct);
      const std::int64_t rows = cut(m, row_tiles, rt + 1) - row, cols = cut(n, col_tiles, ct + 1) - col;
      // Row `row` of op(A) starts at A[row, 0], or at column `row` of A when A is transposed; column `col`
      // of op(B) starts at B[0, col], or at row `col` of B when B is transposed.
      const float* a_tile = p.ta ? p.a + row : p.a + row * p.lda;
      const float* b_tile = p.tb ? p.b + col * p.ldb : p.b + col;
      if (bf16)
        bf16_product(p.ta, p.tb, rows, cols, k, a_tile, p.lda, b_tile, p.ldb, p.y + row * n + col, n);
      else if (tile_in_place(rows, cols, k))
        product_in_place(p.ta, p.tb, rows, cols, k, a_tile, p.lda, b_tile, p.ldb, p.y + row * n + col, n);
      else
        cblas_sgemm(CblasRowMajor, p.ta ? CblasTrans : CblasNoTrans, p.tb ? CblasTrans : CblasNoTrans,
                    static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(k), 1.0f, a_tile,
                    static_cast<int>(p.lda), b_tile, static_cast<int>(p.ldb), 0.0f, p.y + row * n + col,
                    static_cast<int>(n));
      finish(row, col, rows, cols);
    }
  });
}

// The product of a node's inputs 0 and 1 into its output. Operands of rank 3 and up are the matrices of their
// rows (matrix_dims; core/ops/matmul.cpp).
Product node_product(KernelContext& ctx, bool ta, bool tb) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  Tensor& y = ctx.output();
  const MatrixDims ma = matrix_dims(a.shape()), my = matrix_dims(y.shape());
  return {.ta = ta,
          .tb = tb,
          .rows = my.rows,
          .cols = my.cols,
          .depth = ta ? ma.rows : ma.cols,
          .a = a.data<float>(),
          .lda = ma.cols,
          .b = b.data<float>(),
          .ldb = matrix_dims(b.shape()).cols,
          .y = y.mutable_data<float>()};
}

void matmul_cpu(KernelContext& ctx) {
  multiply(ctx, node_product(ctx, ctx.attrs().i_or("transpose_a", 0) != 0, ctx.attrs().i_or("transpose_b", 0) != 0));
}

// FusedMatMul(x, W, b): activation(x W + b) with activation "linear" or "relu", a Dense layer in one node
// instead of three. Each output tile gets its bias and activation right after its sgemm, while it is still
// in cache. The arithmetic is that of MatMul, BiasAdd and Relu one after another, so the results are
// bit-identical to the unfused graph's.
void fused_matmul_cpu(KernelContext& ctx) {
  const bool relu = fused_relu(ctx.attrs());
  const float* bias = ctx.input(2).data<float>();
  float* py = ctx.output().mutable_data<float>();
  const std::int64_t n = matrix_dims(ctx.output().shape()).cols;
  multiply_tiles(ctx, node_product(ctx, false, false),
                 [&](std::int64_t row, std::int64_t col, std::int64_t rows, std::int64_t cols) {
                   add_bias_activation(py + row * n + col, n, rows, cols, bias + col, relu);
                 });
}

}  // namespace

void multiply(const KernelContext& ctx, const Product& p) {
  multiply_tiles(ctx, p, [](std::int64_t, std::int64_t, std::int64_t, std::int64_t) {});
}

TCTL_REGISTER_KERNELS("cpu", {"MatMul", matmul_cpu}, {"FusedMatMul", fused_matmul_cpu});

}  // namespace tctl::cpu
