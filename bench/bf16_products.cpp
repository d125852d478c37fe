// The CPU's bfloat16 products (kernels/cpu/bf16_product.h) against the float32 path tensorctl takes for the
// same tile (small_product's blocks in place where tile_in_place, else sgemm), one thread, on the shapes of
// the 784 MLP's and a transformer's tiles: GFLOP/s, best of 5 runs of about 2 GFLOP each. Run by
// bench/cpu_bf16.sh; bench/README.md, "bfloat16 products on the CPU".
//
// Usage: bench_bf16_products
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "core/compute_type.h"
#include "kernels/cpu/bf16_product.h"
#include "kernels/cpu/small_product.h"

namespace {

struct Shape {
  long rows, k, cols;
  bool ta, tb;
  const char* what;
};

// GFLOP/s of `product` on the shape, best of 5 runs.
template <class Product>
double rate(const Shape& s, Product product) {
  const long reps = std::max(5L, 2'000'000'000L / (2 * s.rows * s.k * s.cols));
  double best = 0;
  for (int run = 0; run < 5; ++run) {
    const auto start = std::chrono::steady_clock::now();
    for (long r = 0; r < reps; ++r) product();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, 2.0 * s.rows * s.k * s.cols * reps / seconds / 1e9);
  }
  return best;
}

}  // namespace

int main() {
  openblas_set_num_threads(1);
  if (!tctl::cpu_bf16_products()) {
    std::printf("this processor has no AVX-512 BF16 (or TCTL_CPU_BF16=0): no bfloat16 products to measure\n");
    return 0;
  }
  const Shape shapes[] = {{512, 128, 384, false, false, "transformer query/key/value"},
                          {512, 512, 128, false, false, "transformer feedforward output"},
                          {512, 384, 128, false, true, "transformer input gradient"},
                          {128, 512, 384, true, false, "transformer weight gradient part"},
                          {128, 784, 512, false, false, "784 MLP first layer"},
                          {128, 512, 784, false, true, "784 MLP input gradient"},
                          {512, 512, 512, false, false, "square"}};
  std::mt19937 gen(1);
  std::normal_distribution<float> normal;
  std::printf("%-34s %-16s %10s %10s %7s\n", "product", "rows x k x cols", "bfloat16", "float32", "ratio");
  for (const Shape& s : shapes) {
    std::vector<float> a(s.rows * s.k), b(s.k * s.cols), y(s.rows * s.cols);
    for (float& x : a) x = normal(gen);
    for (float& x : b) x = normal(gen);
    const long lda = s.ta ? s.rows : s.k, ldb = s.tb ? s.k : s.cols;
    const double bf16 = rate(s, [&] {
      tctl::cpu::bf16_product(s.ta, s.tb, s.rows, s.cols, s.k, a.data(), lda, b.data(), ldb, y.data(), s.cols);
    });
    const double f32 = rate(s, [&] {
      if (tctl::cpu::tile_in_place(s.rows, s.cols, s.k))
        tctl::cpu::product_in_place(s.ta, s.tb, s.rows, s.cols, s.k, a.data(), lda, b.data(), ldb, y.data(), s.cols);
      else
        cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.rows, s.cols,
                    s.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, y.data(), s.cols);
    });
    char dims[32];
    std::snprintf(dims, sizeof dims, "%ldx%ldx%ld%s%s", s.rows, s.k, s.cols, s.ta ? " a^T" : "", s.tb ? " b^T" : "");
    std::printf("%-34s %-16s %10.1f %10.1f %6.2fx\n", s.what, dims, bf16, f32, bf16 / f32);
  }
  std::printf("GFLOP/s, one thread, best of 5\n");
  return 0;
}
