// The CPU's products under mixed_bfloat16 (kernels/cpu/bf16_product.h): bfloat16 operands summed in float32
// on a processor with AVX-512 BF16, float32's bits elsewhere.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/compute_type.h"
#include "kernels/cpu/bf16_product.h"
#include "kernels/op_test_util.h"

using namespace tctl;
using tctl::testing::random_tensor;
using tctl::testing::run_op;
using tctl::testing::run_op_at;
using tctl::testing::transposes;

namespace bf16_test {

bool same_bits(const Tensor& x, const Tensor& y) {
  return x.shape() == y.shape() &&
         std::memcmp(x.raw_data(), y.raw_data(), static_cast<std::size_t>(x.num_elements()) * sizeof(float)) == 0;
}

// The largest |y - exact| / sum |products| over the outputs, the exact product of the operands rounded to
// bfloat16 summed in double. The proven bound of a float32 sum of k terms is about k units of float32's last
// place (9e-5 at k = 1537); random operands' errors stay far below it, so the tests ask for 1e-5, which a
// wrong pairing, mask or transpose misses by orders of magnitude.
double worst_error(const float* y, const float* a, const float* b, bool ta, bool tb, std::int64_t m, std::int64_t k,
                   std::int64_t n) {
  double worst = 0;
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double sum = 0, size = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        const double x = round_to(ComputeType::kBF16, ta ? a[p * m + i] : a[i * k + p]);
        const double w = round_to(ComputeType::kBF16, tb ? b[j * k + p] : b[p * n + j]);
        sum += x * w;
        size += std::fabs(x * w);
      }
      worst = std::max(worst, std::fabs(y[i * n + j] - sum) / std::max(size, 1e-30));
    }
  return worst;
}

struct Case {
  std::int64_t m, k, n;
};

TEST_CASE("MatMul under mixed_bfloat16 sums bfloat16 operands where the CPU has AVX-512 BF16, else float32's") {
  // 1100 rows: three 512-row tiles cut into four; k of 1025: three blocks of depth 512 (256 pairs), the last
  // pair half zero; 35 and 19 columns: a panel and a part of one.
  for (const Case c : {Case{1100, 37, 19}, Case{13, 1025, 35}, Case{1, 64, 128}, Case{1, 5, 3}, Case{256, 64, 256}}) {
    CAPTURE(c.m);
    CAPTURE(c.k);
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        CAPTURE(ta);
        CAPTURE(tb);
        const Tensor a = random_tensor(ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, 1);
        const Tensor b = random_tensor(tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, 2);
        const Tensor f32 = run_op_at(ComputeType::kF32, "MatMul", {a, b}, transposes(ta, tb), 1);
        const Tensor one = run_op_at(ComputeType::kBF16, "MatMul", {a, b}, transposes(ta, tb), 1);
        const Tensor two = run_op_at(ComputeType::kBF16, "MatMul", {a, b}, transposes(ta, tb), 2);
        CHECK(same_bits(one, two));
        if (!cpu_bf16_products()) {
          CHECK(same_bits(one, f32));
          continue;
        }
        CHECK(worst_error(one.data<float>(), a.data<float>(), b.data<float>(), ta, tb, c.m, c.k, c.n) < 1e-5);
        CHECK_FALSE(same_bits(one, f32));
      }
  }
  if (!cpu_bf16_products()) MESSAGE("this processor has no AVX-512 BF16 (or TCTL_CPU_BF16=0): float32's products");
}

TEST_CASE("FusedMatMul under mixed_bfloat16 adds its bias and ReLU to MatMul's bfloat16 product") {
  const Tensor x = random_tensor(Shape{70, 300}, 3), w = random_tensor(Shape{300, 45}, 4),
               bias = random_tensor(Shape{45}, 5);
  const Tensor product = run_op_at(ComputeType::kBF16, "MatMul", {x, w}, {}, 1);
  const Tensor biased = run_op("BiasAdd", {product, bias}, {});
  const Tensor relu = run_op("Relu", {biased}, {});
  CHECK(same_bits(
      run_op_at(ComputeType::kBF16, "FusedMatMul", {x, w, bias}, Attrs{{"activation", std::string("relu")}}, 2), relu));
}

TEST_CASE("convolutions stay float32 under mixed_bfloat16 on the CPU, im2col's products too") {
  // A 1 x 5 kernel over 40 channels: 200 taps, past the direct sums, so its products are im2col's sgemm.
  const Tensor x = random_tensor(Shape{2, 6, 9, 40}, 10), k = random_tensor(Shape{1, 5, 40, 16}, 11);
  const Attrs attrs{{"strides", std::vector<std::int64_t>{1, 1}}, {"padding", std::string("same")}};
  CHECK(same_bits(run_op_at(ComputeType::kBF16, "Conv2D", {x, k}, attrs, 1),
                  run_op_at(ComputeType::kF32, "Conv2D", {x, k}, attrs, 1)));
}

TEST_CASE("sim's bfloat16 products are float32 sums of the rounded operands on any processor") {
  // sim rounds the operands and runs the CPU's float32 arithmetic on them, never the CPU's pair sums.
  const Tensor a = random_tensor(Shape{20, 64}, 8), b = random_tensor(Shape{64, 30}, 9);
  const auto rounded = [](Tensor t) {
    float* p = t.mutable_data<float>();
    for (std::int64_t i = 0; i < t.num_elements(); ++i) p[i] = round_to(ComputeType::kBF16, p[i]);
    return t;
  };
  CHECK(same_bits(run_op_at(ComputeType::kBF16, "MatMul", {a, b}, {}, 1, "sim:0"),
                  run_op_at(ComputeType::kF32, "MatMul", {rounded(a.clone()), rounded(b.clone())}, {}, 1)));
}

TEST_CASE("bf16_product: every block of rows, panel width and depth, added to nothing that was in y") {
  if (!cpu_bf16_products()) {
    MESSAGE("this processor has no AVX-512 BF16: bf16_product is not run");
    return;
  }
  for (const Case c :
       {Case{1, 1, 1}, Case{12, 2, 32}, Case{25, 3, 33}, Case{7, 512, 16}, Case{14, 513, 17}, Case{3, 1537, 64}}) {
    CAPTURE(c.m);
    CAPTURE(c.k);
    CAPTURE(c.n);
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const Tensor a = random_tensor(ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, 6);
        const Tensor b = random_tensor(tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, 7);
        // y's row stride is wider than its columns: the floats between the rows must stay as they were.
        const std::int64_t ldy = c.n + 5;
        std::vector<float> y(static_cast<std::size_t>(c.m * ldy), 42.0f);
        cpu::bf16_product(ta, tb, c.m, c.n, c.k, a.data<float>(), ta ? c.m : c.k, b.data<float>(), tb ? c.k : c.n,
                          y.data(), ldy);
        std::vector<float> packed;
        for (std::int64_t i = 0; i < c.m; ++i) {
          packed.insert(packed.end(), y.begin() + i * ldy, y.begin() + i * ldy + c.n);
          for (std::int64_t j = c.n; j < ldy; ++j) CHECK(y[static_cast<std::size_t>(i * ldy + j)] == 42.0f);
        }
        CHECK(worst_error(packed.data(), a.data<float>(), b.data<float>(), ta, tb, c.m, c.k, c.n) < 1e-5);
      }
  }
  float y = 3.0f;
  cpu::bf16_product(false, false, 1, 1, 0, nullptr, 0, nullptr, 1, &y, 1);
  CHECK(y == 0.0f);  // an empty depth sums nothing
}

// What bf16_product.h says of vdpbf16ps: denormal operands count as zero (bfloat16 keeps float32's exponent
// range, so a float32 denormal rounds to a bfloat16 one) and a denormal sum is flushed to zero, whatever the
// MXCSR says; float32's products keep both.
TEST_CASE("bf16_product: denormal operands count as zero, denormal sums flush to zero") {
  if (!cpu_bf16_products()) {
    MESSAGE("this processor has no AVX-512 BF16: bf16_product is not run");
    return;
  }
  const float denormal = 1e-39f, small = 1e-20f;
  REQUIRE(std::fpclassify(denormal) == FP_SUBNORMAL);
  auto product = [](std::vector<float> a, std::vector<float> b) {
    float y = -1.0f;
    cpu::bf16_product(false, false, 1, 1, static_cast<std::int64_t>(a.size()), a.data(), 0, b.data(), 1, &y, 1);
    return y;
  };
  CHECK(product({denormal}, {1.0f}) == 0.0f);                // the operand read as zero
  CHECK(product({denormal, 2.0f}, {1.0f, 3.0f}) == 6.0f);    // ... beside a normal pair
  CHECK(product({small}, {small}) == 0.0f);                  // 1e-40, a denormal sum, flushed
  CHECK(product({small, -small}, {small, -small}) == 0.0f);  // 2e-40 too
  CHECK(std::fpclassify(small * small) == FP_SUBNORMAL);     // where float32 keeps it
  const float normal = product({1e-18f}, {1e-19f});          // 1e-37, normal: kept
  CHECK(std::fpclassify(normal) == FP_NORMAL);
  CHECK(std::fabs(normal - 1e-37f) < 0.01f * 1e-37f);
}

}  // namespace bf16_test
