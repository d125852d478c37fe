#include <cblas.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "kernels/cpu/small_product.h"
#include "kernels/op_test_util.h"

using namespace tctl;
using tctl::testing::check_op;
using tctl::testing::OpCheck;
using tctl::testing::random_tensor;
using tctl::testing::run_op;
using tctl::testing::transposes;

namespace {

// Plain triple loop in double, the reference.
std::vector<double> naive(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  std::int64_t m = a.shape()[ta ? 1 : 0], k = a.shape()[ta ? 0 : 1], n = b.shape()[tb ? 0 : 1];
  std::vector<double> y(static_cast<std::size_t>(m * n));
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        double av = ta ? a.data<float>()[p * m + i] : a.data<float>()[i * k + p];
        double bv = tb ? b.data<float>()[j * k + p] : b.data<float>()[p * n + j];
        s += av * bv;
      }
      y[static_cast<std::size_t>(i * n + j)] = s;
    }
  return y;
}
}  // namespace

TEST_CASE("MatMul gradients for every transpose combination") {
  check_op("MatMul", {{4, 3}, {3, 5}});
  check_op("MatMul", {{4, 3}, {5, 3}}, OpCheck{.attrs = transposes(false, true)});
  check_op("MatMul", {{3, 4}, {3, 5}}, OpCheck{.attrs = transposes(true, false)});
  check_op("MatMul", {{3, 4}, {5, 3}}, OpCheck{.attrs = transposes(true, true)});
}

TEST_CASE("MatMul matches a naive product across tiles and transposes") {
  struct Case {
    std::int64_t m, k, n;
  };
  // 1100 rows make three 512-row tiles, cut into four for an even count; 256 x 256 fits one tile but its
  // 4M multiply-adds are cut in two, for two threads. Single rows: the products of a batch of one.
  for (const Case c :
       {Case{1100, 37, 19}, Case{256, 64, 256}, Case{1, 64, 128}, Case{1, 37, 19}, Case{1, 5, 3}, Case{1, 300, 250}}) {
    CAPTURE(c.m);
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Tensor a = random_tensor(ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, 1);
        Tensor b = random_tensor(tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, 2);
        Tensor y = run_op("MatMul", {a, b}, transposes(ta, tb), 2);
        auto ref = naive(a, b, ta, tb);
        REQUIRE(y.shape() == Shape{c.m, c.n});
        for (std::size_t i = 0; i < ref.size(); ++i) CHECK(y.data<float>()[i] == doctest::Approx(ref[i]).epsilon(1e-4));
      }
  }
}

TEST_CASE("MatMul refuses mismatched inner dimensions naming both shapes") {
  Graph g;
  Output a = g.placeholder("a", DType::kF32, Shape{-1, 4});
  Output b = g.placeholder("b", DType::kF32, Shape{5, 2});
  try {
    g.add("MatMul", {a, b});
    FAIL("expected a ShapeError");
  } catch (const ShapeError& e) {
    std::string m = e.what();
    CHECK(m.find("[?, 4]") != std::string::npos);
    CHECK(m.find("[5, 2]") != std::string::npos);
    CHECK(m.find("MatMul") != std::string::npos);
  }
  CHECK(g.size() == 2);  // the refused node left nothing behind
}

// Finite differences for the linear form; the ReLU form's gradients are checked bit for bit against the
// unfused ops' below.
TEST_CASE("FusedMatMul gradients") {
  check_op("FusedMatMul", {{4, 3}, {3, 5}, {5}}, OpCheck{.attrs = Attrs{{"activation", std::string("linear")}}});
}

TEST_CASE("FusedMatMul gives the bits of MatMul, BiasAdd and Relu run apart, gradients too") {
  // 600 x 540 outputs make four tiles of uneven sizes.
  tctl::testing::check_fused_matches_parts("FusedMatMul", "MatMul",
                                           {random_tensor(Shape{600, 37}, 3), random_tensor(Shape{37, 540}, 4)},
                                           random_tensor(Shape{540}, 5), {});
}

TEST_CASE("FusedMatMul refuses a bias that does not fit the product") {
  Graph g;
  Output x = g.placeholder("x", DType::kF32, Shape{-1, 4});
  Output w = g.placeholder("w", DType::kF32, Shape{4, 3});
  Output b = g.placeholder("b", DType::kF32, Shape{5});
  try {
    g.add("FusedMatMul", {x, w, b}, Attrs{{"activation", std::string("relu")}});
    FAIL("expected a ShapeError");
  } catch (const ShapeError& e) {
    CHECK(std::string(e.what()).find("bias of shape [5]") != std::string::npos);
  }
}

namespace {
// small_product's kernels run on processors with AVX2 and FMA, whatever the build's target.
bool vector_fma() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

// op(a) op(b) by small_product and by a scalar chain of fused multiply-adds over k, with every stride wider
// than its operand (a tile of a larger matrix); requires the two bit for bit, the padding between output
// rows untouched included.
void check_small_product(bool ta, bool tb, std::int64_t rows, std::int64_t cols, std::int64_t k, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  const std::int64_t a_rows = ta ? k : rows, a_cols = ta ? rows : k, b_rows = tb ? cols : k, b_cols = tb ? k : cols;
  const std::int64_t lda = a_cols + 3, ldb = b_cols + 5, ldy = cols + 2;
  std::vector<float> a(static_cast<std::size_t>(a_rows * lda)), b(static_cast<std::size_t>(b_rows * ldb));
  for (float& v : a) v = u(rng);
  for (float& v : b) v = u(rng);
  const auto at = [&](std::int64_t r, std::int64_t i) {
    return a[static_cast<std::size_t>(ta ? i * lda + r : r * lda + i)];
  };
  const auto bt = [&](std::int64_t i, std::int64_t c) {
    return b[static_cast<std::size_t>(tb ? c * ldb + i : i * ldb + c)];
  };
  std::vector<float> ours(static_cast<std::size_t>(rows * ldy), -7.0f), chain = ours;
  cpu::small_product(ta, tb, rows, cols, k, a.data(), lda, b.data(), ldb, ours.data(), ldy);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      float sum = 0.0f;
      for (std::int64_t i = 0; i < k; ++i) sum = std::fma(at(r, i), bt(i, c), sum);
      chain[static_cast<std::size_t>(r * ldy + c)] = sum;
    }
  CAPTURE(ta);
  CAPTURE(tb);
  CAPTURE(rows);
  CAPTURE(k);
  CAPTURE(cols);
  REQUIRE(std::memcmp(ours.data(), chain.data(), ours.size() * sizeof(float)) == 0);
}
}  // namespace

TEST_CASE("every small product, transposed or not, sums each output in one chain over k") {
  if (!vector_fma()) {
    // Without AVX2 and FMA, sgemm takes every product.
    CHECK_FALSE(cpu::every_small_product());
    CHECK_FALSE(cpu::small_product_applies(1, 8, 8));
    return;
  }
  REQUIRE(cpu::every_small_product());
  std::mt19937 rng(11);
  // One to three rows (inference at batch 1 and small batches) at every depth up to the deepest taken.
  for (std::int64_t rows = 1; rows <= 3; ++rows)
    for (std::int64_t k : {1, 2, 3, 17, 64, 128, 255, 256})
      for (std::int64_t cols : {1, 7, 8, 10, 15, 16, 33, 64, 100, 128, 200, 257})
        check_small_product(false, false, rows, cols, k, rng);
  // Row counts reaching the six-row blocks and each way they divide (16 rows: 6 + 5 + 5, or 8 + 8 with
  // AVX-512); columns each block width and the partial one; depths around a transposed block of eight.
  for (const bool ta : {false, true})
    for (const bool tb : {false, true})
      for (std::int64_t rows : {1, 4, 5, 6, 7, 11, 12, 13, 16, 32})
        for (std::int64_t k : {1, 7, 8, 9, 64, 130})
          for (std::int64_t cols : {1, 8, 10, 17, 24, 64, 100}) check_small_product(ta, tb, rows, cols, k, rng);
  // Through MatMul's kernel: 200 x 64 x 128 is cut into two tiles, whatever the thread count; one and two
  // threads give the same bits, and they are small_product's own.
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      Tensor a = random_tensor(ta ? Shape{64, 200} : Shape{200, 64}, 7);
      Tensor b = random_tensor(tb ? Shape{128, 64} : Shape{64, 128}, 8);
      const Tensor one = run_op("MatMul", {a, b}, transposes(ta, tb), 1);
      const Tensor two = run_op("MatMul", {a, b}, transposes(ta, tb), 2);
      REQUIRE(std::memcmp(one.raw_data(), two.raw_data(), one.bytes()) == 0);
      const std::int64_t lda = a.shape()[1], ldb = b.shape()[1];
      std::vector<float> direct(200 * 128);
      cpu::small_product(ta, tb, 200, 128, 64, a.data<float>(), lda, b.data<float>(), ldb, direct.data(), 128);
      CHECK(std::memcmp(direct.data(), one.raw_data(), one.bytes()) == 0);
    }
  CHECK(cpu::small_product_applies(1, 128, 64));
  CHECK(cpu::small_product_applies(64, 128, 32));
  CHECK(cpu::small_product_applies(1024, 128, 16));
  // Past the bound of multiply-adds, which is wider only on a processor with AVX-512 whose OpenBLAS runs
  // narrower kernels.
  const std::string core = openblas_get_corename();
  const bool blas_wide = core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids";
#if defined(TCTL_AS_AVX2)
  const bool avx512f = false;
#else
  const bool avx512f = __builtin_cpu_supports("avx512f");
#endif
  CHECK(cpu::small_product_work() == (avx512f && !blas_wide ? cpu::kWideSmallProductWork : cpu::kSmallProductWork));
  CHECK(cpu::small_product_applies(128, 128, 256) == (cpu::small_product_work() >= 128 * 128 * 256));
  CHECK_FALSE(cpu::small_product_applies(4096, 4096, 8));  // 2^27 multiply-adds
  CHECK_FALSE(cpu::small_product_applies(1, 8, cpu::kSmallProductDepth + 1));
}

TEST_CASE("MatMul's deep tiles go in place by parts only where OpenBLAS's kernels are narrower than ours") {
  // A weight gradient's shape, x^T dy over 600 rows: deeper than one part. In place (by parts of 200) where the
  // wide bound holds, as product_in_place computes it, whatever the tiles and threads; elsewhere sgemm's.
  const bool wide = cpu::small_product_work() == cpu::kWideSmallProductWork;
  CHECK(cpu::tile_in_place(128, 128, 600) == wide);
  CHECK(cpu::tile_in_place(512, 512, 256) == wide);  // a whole tile, one part: 2^26
  CHECK(cpu::tile_in_place(16, 16, 64) == cpu::every_small_product());
  CHECK_FALSE(cpu::tile_in_place(1024, 1024, 300));  // parts of 150, but 1024 x 1024 x 150 > 2^26
  Tensor x = random_tensor(Shape{600, 96}, 21);
  Tensor dy = random_tensor(Shape{600, 80}, 22);
  const Tensor one = run_op("MatMul", {x, dy}, transposes(true, false), 1);
  const Tensor two = run_op("MatMul", {x, dy}, transposes(true, false), 2);
  REQUIRE(std::memcmp(one.raw_data(), two.raw_data(), one.bytes()) == 0);
  if (!wide) return;  // sgemm's bits, in however many tiles MatMul cuts the product into
  std::vector<float> in_place(96 * 80), sgemm(96 * 80);
  cpu::product_in_place(true, false, 96, 80, 600, x.data<float>(), 96, dy.data<float>(), 80, in_place.data(), 80);
  CHECK(std::memcmp(in_place.data(), one.raw_data(), one.bytes()) == 0);
  // sgemm's differ in their last bits here, so the check above means something.
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, 96, 80, 600, 1.0f, x.data<float>(), 96, dy.data<float>(), 80,
              0.0f, sgemm.data(), 80);
  CHECK(std::memcmp(sgemm.data(), one.raw_data(), one.bytes()) != 0);
}

TEST_CASE("a b packed in panels gives product_in_place's bits, its depth cut in parts or not") {
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  // Columns of whole panels (8 or 16 floats a vector) and not; depths within one part and past it (a
  // recurrent layer's 4 H gates back: 512); rows below one block and the recurrence's blocks of 16.
  for (std::int64_t cols : {16, 20, 64, 128, 136, 512})
    for (std::int64_t k : {1, 9, 128, 300, 512})
      for (std::int64_t rows : {1, 5, 16}) {
        CAPTURE(cols);
        CAPTURE(k);
        CAPTURE(rows);
        const std::int64_t lda = k + 3, ldb = cols + 5, ldy = cols + 2;
        std::vector<float> a(static_cast<std::size_t>(rows * lda)), b(static_cast<std::size_t>(k * ldb));
        for (float& v : a) v = u(rng);
        for (float& v : b) v = u(rng);
        std::vector<float> packed_y(static_cast<std::size_t>(rows * ldy), -7.0f), plain_y = packed_y;
        cpu::PackedPanels packed;
        packed.pack(k, cols, b.data(), ldb, 16);
        CHECK(packed.packed() == (vector_fma() && cpu::small_product_applies(16, cols, k > 256 ? (k + 1) / 2 : k)));
        cpu::PackedPanels one_row;
        one_row.pack(k, cols, b.data(), ldb, 1);
        CHECK_FALSE(one_row.packed());
        cpu::product_in_place(rows, a.data(), lda, packed, packed_y.data(), ldy);
        cpu::product_in_place(false, false, rows, cols, k, a.data(), lda, b.data(), ldb, plain_y.data(), ldy);
        REQUIRE(std::memcmp(packed_y.data(), plain_y.data(), plain_y.size() * sizeof(float)) == 0);
      }
}

TEST_CASE("MatMul of a [N, T, F] sequence by [F, M] multiplies every step, and its gradients check") {
  const Tensor x = random_tensor(Shape{3, 4, 5}, 1);
  const Tensor w = random_tensor(Shape{5, 6}, 2);
  const Tensor y = run_op("MatMul", {x, w}, {});
  REQUIRE(y.shape() == Shape{3, 4, 6});
  const Tensor flat = run_op("MatMul", {x.reshaped(Shape{12, 5}), w}, {});
  CHECK(y.to_floats() == flat.to_floats());
  check_op("MatMul", {Shape{3, 4, 5}, Shape{5, 6}}, {});
}
