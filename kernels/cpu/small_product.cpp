// Thin products summed in place (small_product.h).
#include "kernels/cpu/small_product.h"

#include <cblas.h>
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "core/counter_random.h"

// Fused multiply-adds in vectors: AVX-512, or AVX2 with FMA.
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#define TCTL_VECTOR_FMA 1
#else
#define TCTL_VECTOR_FMA 0
#endif

namespace tctl::cpu {
namespace {

#if defined(__AVX512F__)
constexpr bool kHasVectorFma = true;
constexpr int kWidth = 16;
using Reg = __m512;
inline Reg zero() { return _mm512_setzero_ps(); }
inline Reg broadcast(float x) { return _mm512_set1_ps(x); }
inline Reg load(const float* p) { return _mm512_loadu_ps(p); }
inline void store(float* p, Reg v) { _mm512_storeu_ps(p, v); }
inline Reg fma(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
// The first `n` (< kWidth) lanes only; the others read as zero and are never written.
struct Partial {
  __mmask16 mask;
  explicit Partial(std::int64_t n) : mask(static_cast<__mmask16>((1u << n) - 1u)) {}
  Reg load(const float* p) const { return _mm512_maskz_loadu_ps(mask, p); }
  void store(float* p, Reg v) const { _mm512_mask_storeu_ps(p, mask, v); }
};
#elif defined(__AVX2__) && defined(__FMA__)
constexpr bool kHasVectorFma = true;
constexpr int kWidth = 8;
using Reg = __m256;
inline Reg zero() { return _mm256_setzero_ps(); }
inline Reg broadcast(float x) { return _mm256_set1_ps(x); }
inline Reg load(const float* p) { return _mm256_loadu_ps(p); }
inline void store(float* p, Reg v) { _mm256_storeu_ps(p, v); }
inline Reg fma(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
struct Partial {
  __m256i mask;
  explicit Partial(std::int64_t n)
      : mask(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))) {}
  Reg load(const float* p) const { return _mm256_maskload_ps(p, mask); }
  void store(float* p, Reg v) const { _mm256_maskstore_ps(p, mask, v); }
};
#else
constexpr bool kHasVectorFma = false;
#endif

#if TCTL_VECTOR_FMA
// R rows by V vectors of columns: R x V chains, each over all of k. Enough chains in flight hide the
// multiply-add's latency; R x V <= 8 keeps them in registers on AVX2's 16.
template <int R, int V>
void block(std::int64_t k, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float* y,
           std::int64_t ldy) {
  Reg acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = zero();
  for (std::int64_t i = 0; i < k; ++i) {
    Reg bv[V];
    for (int v = 0; v < V; ++v) bv[v] = load(b + i * ldb + v * kWidth);
    for (int r = 0; r < R; ++r) {
      const Reg x = broadcast(a[r * lda + i]);
      for (int v = 0; v < V; ++v) acc[r][v] = fma(x, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) store(y + r * ldy + v * kWidth, acc[r][v]);
}

// The last cols (< kWidth) columns.
template <int R>
void partial_block(std::int64_t k, std::int64_t cols, const float* a, std::int64_t lda, const float* b,
                   std::int64_t ldb, float* y, std::int64_t ldy) {
  const Partial part(cols);
  Reg acc[R];
  for (int r = 0; r < R; ++r) acc[r] = zero();
  for (std::int64_t i = 0; i < k; ++i) {
    const Reg bv = part.load(b + i * ldb);
    for (int r = 0; r < R; ++r) acc[r] = fma(broadcast(a[r * lda + i]), bv, acc[r]);
  }
  for (int r = 0; r < R; ++r) part.store(y + r * ldy, acc[r]);
}

// Columns from `col` on, in blocks of V vectors while they fit, then of V / 2, down to one vector and the
// remainder.
template <int R, int V>
void columns(std::int64_t col, std::int64_t cols, std::int64_t k, const float* a, std::int64_t lda, const float* b,
             std::int64_t ldb, float* y, std::int64_t ldy) {
  for (; col + V * kWidth <= cols; col += V * kWidth) block<R, V>(k, a, lda, b + col, ldb, y + col, ldy);
  if constexpr (V > 1) {
    columns<R, V / 2>(col, cols, k, a, lda, b, ldb, y, ldy);
  } else if (col < cols) {
    partial_block<R>(k, cols - col, a, lda, b + col, ldb, y + col, ldy);
  }
}

#endif

// One row count, with depths and widths that reach each block size and the partial block, on values
// spread over several orders of magnitude so that any other order of summation shows in the bits.
bool probe(std::int64_t rows) {
  if (!kHasVectorFma) return false;
  // Draws from the counter-based stream: a uniform value in [-0.5, 0.5) times a power of two from 1 to 128.
  const std::uint64_t key = static_cast<std::uint64_t>(rows);
  std::uint64_t draw = 0;
  auto next = [&] {
    const float unit = uniform_at(key, draw++) - 0.5f;
    return unit * static_cast<float>(1u << static_cast<unsigned>(uniform_at(key, draw++) * 8.0f));
  };
  const std::int64_t shapes[][2] = {{1, 1}, {7, 5}, {64, 8 * 16 + 4 * 16 + 2 * 16 + 16 + 9}, {kSmallProductDepth, 33}};
  for (const auto& [k, cols] : shapes) {
    std::vector<float> a(static_cast<std::size_t>(rows * k)), b(static_cast<std::size_t>(k * cols));
    for (float& v : a) v = next();
    for (float& v : b) v = next();
    std::vector<float> ours(static_cast<std::size_t>(rows * cols)), blas(ours.size());
    small_product(rows, cols, k, a.data(), k, b.data(), cols, ours.data(), cols);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows), static_cast<int>(cols),
                static_cast<int>(k), 1.0f, a.data(), static_cast<int>(k), b.data(), static_cast<int>(cols), 0.0f,
                blas.data(), static_cast<int>(cols));
    if (std::memcmp(ours.data(), blas.data(), ours.size() * sizeof(float)) != 0) return false;
  }
  return true;
}

}  // namespace

#if TCTL_VECTOR_FMA
void small_product(std::int64_t rows, std::int64_t cols, std::int64_t k, const float* a, std::int64_t lda,
                   const float* b, std::int64_t ldb, float* y, std::int64_t ldy) {
  if (rows == 1)
    columns<1, 8>(0, cols, k, a, lda, b, ldb, y, ldy);
  else if (rows == 2)
    columns<2, 4>(0, cols, k, a, lda, b, ldb, y, ldy);
  else
    columns<3, 2>(0, cols, k, a, lda, b, ldb, y, ldy);
}
#else
void small_product(std::int64_t, std::int64_t, std::int64_t, const float*, std::int64_t, const float*, std::int64_t,
                   float*, std::int64_t) {}
#endif

bool small_product_matches_blas(std::int64_t rows) {
  static const bool matches[kSmallProductRows] = {probe(1), probe(2), probe(3)};
  return rows >= 1 && rows <= kSmallProductRows && matches[rows - 1];
}

bool small_product_applies(std::int64_t rows, std::int64_t k) {
  return k <= kSmallProductDepth && small_product_matches_blas(rows);
}

}  // namespace tctl::cpu
