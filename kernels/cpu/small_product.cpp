// Small products summed in place (small_product.h).
#include "kernels/cpu/small_product.h"

#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/ceil_div.h"
#include "core/errors.h"

namespace tctl::cpu {
namespace {

// This processor's vector units, asked once. The kernels below run only where it has AVX2 and FMA, and
// which products they take depends on the processor, not on the build's target: a native build and a
// portable one compute the same bits on the same machine.
struct CpuUnits {
  bool avx2_fma = false;
  bool avx512f = false;
  CpuUnits() {
    __builtin_cpu_init();
    avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#if defined(TCTL_AS_AVX2)
    avx512f = false;  // TENSORCTL_AS_AVX2 (CMakeLists.txt): as on a processor without it
#else
    avx512f = __builtin_cpu_supports("avx512f");
#endif
  }
};
const CpuUnits& cpu_units() {
  static const CpuUnits units;
  return units;
}

// kBlockRows, for code outside the kernels' region.
std::int64_t block_rows();
// b (k x cols, row stride ldb) into panels (PackedPanels), and the product of rows [k0, k0 + kp) of such a b of
// depth k; compiled with the kernels below.
void pack_panels(std::int64_t k, std::int64_t cols, const float* b, std::int64_t ldb, float* out);
void packed_product(std::int64_t rows, std::int64_t cols, std::int64_t k, std::int64_t k0, std::int64_t kp,
                    const float* a, std::int64_t lda, const float* packed, float* y, std::int64_t ldy);

// At least n floats of this thread's own, for a transposed operand.
float* thread_buffer(std::size_t n) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

}  // namespace
}  // namespace tctl::cpu

// The kernels: for AVX-512 where the build targets it, else for AVX2 and FMA, even where the build targets
// less (-DTENSORCTL_NATIVE=OFF); they run only on processors with those units (cpu_units). No
// standard-library function is instantiated in this region: a copy compiled here for AVX2 could be the one
// the linker keeps for the whole program.
#if !defined(__AVX512F__) && !(defined(__AVX2__) && defined(__FMA__))
#define TCTL_SMALL_PRODUCT_TARGET 1
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
#endif

namespace tctl::cpu {
namespace {

#if defined(__AVX512F__)
constexpr int kWidth = 16;
using Reg = __m512;
inline Reg zero() { return _mm512_setzero_ps(); }
inline Reg broadcast(float x) { return _mm512_set1_ps(x); }
inline Reg reg_load(const float* p) { return _mm512_loadu_ps(p); }
inline void reg_store(float* p, Reg v) { _mm512_storeu_ps(p, v); }
inline Reg fma(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
// The first `n` (< kWidth) lanes only; the others read as zero and are never written.
struct Partial {
  __mmask16 mask;
  explicit Partial(std::int64_t n) : mask(static_cast<__mmask16>((1u << n) - 1u)) {}
  Reg load(const float* p) const { return _mm512_maskz_loadu_ps(mask, p); }
  void store(float* p, Reg v) const { _mm512_mask_storeu_ps(p, mask, v); }
};
#else
constexpr int kWidth = 8;
using Reg = __m256;
inline Reg zero() { return _mm256_setzero_ps(); }
inline Reg broadcast(float x) { return _mm256_set1_ps(x); }
inline Reg reg_load(const float* p) { return _mm256_loadu_ps(p); }
inline void reg_store(float* p, Reg v) { _mm256_storeu_ps(p, v); }
inline Reg fma(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
struct Partial {
  __m256i mask;
  explicit Partial(std::int64_t n)
      : mask(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))) {}
  Reg load(const float* p) const { return _mm256_maskload_ps(p, mask); }
  void store(float* p, Reg v) const { _mm256_maskstore_ps(p, mask, v); }
};
#endif

// Element (r, i) of op(a): a holds op(a) (TA false, row stride lda) or its transpose (TA true).
template <bool TA>
inline float a_at(const float* a, std::int64_t lda, std::int64_t r, std::int64_t i) {
  return TA ? a[i * lda + r] : a[r * lda + i];
}

// R rows by V vectors of columns: R x V chains, each over all of k. Enough chains in flight hide the
// multiply-add's latency; R x V <= 12 keeps them, V rows of b and a broadcast in AVX2's 16 registers.
template <bool TA, int R, int V>
void block(std::int64_t k, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float* y,
           std::int64_t ldy) {
  // The loops over registers are unrolled whatever the optimisation level: rolled, the accumulators would
  // live in memory (at -O2 the product took twice sgemm's time).
  Reg acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) acc[r][v] = zero();
  for (std::int64_t i = 0; i < k; ++i) {
    Reg bv[V];
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) bv[v] = reg_load(b + i * ldb + v * kWidth);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const Reg x = broadcast(a_at<TA>(a, lda, r, i));
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) acc[r][v] = fma(x, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) reg_store(y + r * ldy + v * kWidth, acc[r][v]);
}

// The last cols (< kWidth) columns.
template <bool TA, int R>
void partial_block(std::int64_t k, std::int64_t cols, const float* a, std::int64_t lda, const float* b,
                   std::int64_t ldb, float* y, std::int64_t ldy) {
  const Partial part(cols);
  Reg acc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r] = zero();
  for (std::int64_t i = 0; i < k; ++i) {
    const Reg bv = part.load(b + i * ldb);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = fma(broadcast(a_at<TA>(a, lda, r, i)), bv, acc[r]);
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) part.store(y + r * ldy, acc[r]);
}

// Columns from `col` on, in blocks of V vectors while they fit, then of V / 2, down to one vector and the
// remainder.
template <bool TA, int R, int V>
void columns(std::int64_t col, std::int64_t cols, std::int64_t k, const float* a, std::int64_t lda, const float* b,
             std::int64_t ldb, float* y, std::int64_t ldy) {
  for (; col + V * kWidth <= cols; col += V * kWidth) block<TA, R, V>(k, a, lda, b + col, ldb, y + col, ldy);
  if constexpr (V > 1) {
    columns<TA, R, V / 2>(col, cols, k, a, lda, b, ldb, y, ldy);
  } else if (col < cols) {
    partial_block<TA, R>(k, cols - col, a, lda, b + col, ldb, y + col, ldy);
  }
}

// Rows a block: R x 2 vectors of accumulators, 12 of AVX2's 16 registers at 6 rows; AVX-512's 32 hold 16
// at 8, which loads b once for 8 rows (bench_workloads lstm_text_b64, whose 16-row blocks of examples
// went 6 + 6 + 4 with the last block at two thirds of the others' speed).
constexpr int kBlockRows = kWidth == 16 ? 8 : 6;

// Calls f.template operator()<R>() with R = rows, for 1 to kBlockRows rows.
template <class F>
void with_rows(std::int64_t rows, F&& f) {
  [&]<int... R>(std::integer_sequence<int, R...>) {
    (void)((rows == R + 1 ? (f.template operator()<R + 1>(), true) : false) || ...);
  }
  (std::make_integer_sequence<int, kBlockRows>());
}

// A product of fewer than kBlockRows rows: blocks of all its rows, as wide as keeps about eight chains in
// flight.
template <bool TA>
void few_rows(std::int64_t rows, std::int64_t cols, std::int64_t k, const float* a, std::int64_t lda, const float* b,
              std::int64_t ldb, float* y, std::int64_t ldy) {
  with_rows(rows, [&]<int R>() { columns<TA, R, (R == 1 ? 8 : R == 2 ? 4 : 2)>(0, cols, k, a, lda, b, ldb, y, ldy); });
}

// All rows of one panel of V vectors of columns (V = 0: the last, partial vector of `cols` columns), in
// blocks of at most kBlockRows rows as even as they divide: on AVX2 16 rows go 6 + 5 + 5, not 6 + 6 + 4,
// whose last block (6 loads and broadcasts to 8 FMAs, against 8 to 12) was measured at two thirds of the
// others' speed a row (bench_workloads lstm_text_b64, whose blocks of examples are 16 rows). Each output is summed over
// k in the same order whatever its block, so the bits do not change. The panel of b (k x V vectors) stays in the
// first-level cache while every block of rows reads it.
template <bool TA, int V>
void panel(std::int64_t rows, std::int64_t cols, std::int64_t k, const float* a, std::int64_t lda, const float* b,
           std::int64_t ldb, float* y, std::int64_t ldy) {
  const std::int64_t blocks = ceil_div(rows, std::int64_t{kBlockRows});
  for (std::int64_t i = 0, r = 0; i < blocks; ++i) {
    const std::int64_t n = rows / blocks + (i < rows % blocks ? 1 : 0);
    const float* ar = TA ? a + r : a + r * lda;
    with_rows(n, [&]<int R>() {
      if constexpr (V == 0)
        partial_block<TA, R>(k, cols, ar, lda, b, ldb, y + r * ldy, ldy);
      else
        block<TA, R, V>(k, ar, lda, b, ldb, y + r * ldy, ldy);
    });
    r += n;
  }
}

template <bool TA>
void product(std::int64_t rows, std::int64_t cols, std::int64_t k, const float* a, std::int64_t lda, const float* b,
             std::int64_t ldb, float* y, std::int64_t ldy) {
  if (rows < kBlockRows) return few_rows<TA>(rows, cols, k, a, lda, b, ldb, y, ldy);
  std::int64_t col = 0;
  for (; col + 2 * kWidth <= cols; col += 2 * kWidth) panel<TA, 2>(rows, 0, k, a, lda, b + col, ldb, y + col, ldy);
  for (; col + kWidth <= cols; col += kWidth) panel<TA, 1>(rows, 0, k, a, lda, b + col, ldb, y + col, ldy);
  if (col < cols) panel<TA, 0>(rows, cols - col, k, a, lda, b + col, ldb, y + col, ldy);
}

// bt (cols x k, row stride ldb) into t (k x cols, packed): eight by eight in registers where both fit.
void transpose_into(std::int64_t cols, std::int64_t k, const float* bt, std::int64_t ldb, float* t) {
  std::int64_t c = 0;
  for (; c + 8 <= cols; c += 8) {
    std::int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
      __m256 r[8], lo[8];
      for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(bt + (c + j) * ldb + i);
      for (int j = 0; j < 8; j += 2) {
        lo[j] = _mm256_unpacklo_ps(r[j], r[j + 1]);
        lo[j + 1] = _mm256_unpackhi_ps(r[j], r[j + 1]);
      }
      // lo[0..3] hold rows 0-3 interleaved, lo[4..7] rows 4-7; pair them into columns.
      for (int h = 0; h < 2; ++h) {
        const __m256 s0 = _mm256_shuffle_ps(lo[4 * h], lo[4 * h + 2], 0x44);
        const __m256 s1 = _mm256_shuffle_ps(lo[4 * h], lo[4 * h + 2], 0xEE);
        const __m256 s2 = _mm256_shuffle_ps(lo[4 * h + 1], lo[4 * h + 3], 0x44);
        const __m256 s3 = _mm256_shuffle_ps(lo[4 * h + 1], lo[4 * h + 3], 0xEE);
        r[4 * h] = s0;
        r[4 * h + 1] = s1;
        r[4 * h + 2] = s2;
        r[4 * h + 3] = s3;
      }
      for (int j = 0; j < 4; ++j) {
        _mm256_storeu_ps(t + (i + j) * cols + c, _mm256_permute2f128_ps(r[j], r[j + 4], 0x20));
        _mm256_storeu_ps(t + (i + j + 4) * cols + c, _mm256_permute2f128_ps(r[j], r[j + 4], 0x31));
      }
    }
    for (; i < k; ++i)
      for (std::int64_t j = c; j < c + 8; ++j) t[i * cols + j] = bt[j * ldb + i];
  }
  for (; c < cols; ++c)
    for (std::int64_t i = 0; i < k; ++i) t[i * cols + c] = bt[c * ldb + i];
}

// The width of a packed panel: two vectors, as product's widest blocks of rows read.
constexpr std::int64_t kPanel = 2 * kWidth;

// Where row i of panel p starts in b packed (PackedPanels): full panels of kPanel columns, then the rest.
inline std::int64_t panel_offset(std::int64_t k, std::int64_t cols, std::int64_t p, std::int64_t i) {
  const std::int64_t full = cols / kPanel;
  return p < full ? (p * k + i) * kPanel : full * k * kPanel + i * (cols - full * kPanel);
}

std::int64_t block_rows() { return kBlockRows; }

void pack_panels(std::int64_t k, std::int64_t cols, const float* b, std::int64_t ldb, float* out) {
  const std::int64_t panels = ceil_div(cols, kPanel);
  for (std::int64_t p = 0; p < panels; ++p) {
    const std::int64_t c0 = p * kPanel, width = cols - c0 < kPanel ? cols - c0 : kPanel;
    for (std::int64_t i = 0; i < k; ++i) {
      float* row = out + panel_offset(k, cols, p, i);
      for (std::int64_t c = 0; c < width; ++c) row[c] = b[i * ldb + c0 + c];
    }
  }
}

// Rows [k0, k0 + kp) of b packed (depth k): each panel's product in turn.
void packed_product(std::int64_t rows, std::int64_t cols, std::int64_t k, std::int64_t k0, std::int64_t kp,
                    const float* a, std::int64_t lda, const float* packed, float* y, std::int64_t ldy) {
  const std::int64_t panels = ceil_div(cols, kPanel);
  for (std::int64_t p = 0; p < panels; ++p) {
    const std::int64_t c0 = p * kPanel, width = cols - c0 < kPanel ? cols - c0 : kPanel;
    product<false>(rows, width, kp, a, lda, packed + panel_offset(k, cols, p, k0), width, y + c0, ldy);
  }
}

}  // namespace

void small_product(bool ta, bool tb, std::int64_t rows, std::int64_t cols, std::int64_t k, const float* a,
                   std::int64_t lda, const float* b, std::int64_t ldb, float* y, std::int64_t ldy) {
  if (tb) {
    // b holds op(b) transposed, `cols` rows of k: rows of op(b) must be contiguous to load as vectors, so
    // it is transposed first, into this thread's buffer (for 64 x 128, about a tenth of the product's time).
    float* packed = thread_buffer(static_cast<std::size_t>(cols * k));
    transpose_into(cols, k, b, ldb, packed);
    b = packed;
    ldb = cols;
  }
  if (ta)
    product<true>(rows, cols, k, a, lda, b, ldb, y, ldy);
  else
    product<false>(rows, cols, k, a, lda, b, ldb, y, ldy);
}

}  // namespace tctl::cpu

#ifdef TCTL_SMALL_PRODUCT_TARGET
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

namespace tctl::cpu {

bool every_small_product() { return cpu_units().avx2_fma; }

std::int64_t small_product_work() {
  static const std::int64_t work = [] {
    if (!cpu_units().avx512f) return kSmallProductWork;
    const std::string core = openblas_get_corename();
    const bool blas_wide = core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids";
    return blas_wide ? kSmallProductWork : kWideSmallProductWork;
  }();
  return work;
}

bool small_product_wide() { return kWidth == 16; }

bool small_product_applies(std::int64_t rows, std::int64_t cols, std::int64_t k) {
  return k <= kSmallProductDepth && every_small_product() && rows * cols * k <= small_product_work();
}

namespace {

// The depth of each part product_in_place cuts a depth k into.
std::int64_t part_depth(std::int64_t k) {
  const std::int64_t parts = std::max<std::int64_t>(1, (k + kSmallProductDepth - 1) / kSmallProductDepth);
  return (k + parts - 1) / parts;
}

// y = the sum over the parts of the depth of multiply(k0, kp, out, ldo), each part's product written to out: y
// for the first, a buffer added to y for the others.
template <class Multiply>
void sum_parts(std::int64_t rows, std::int64_t cols, std::int64_t k, float* y, std::int64_t ldy, Multiply multiply) {
  const std::int64_t depth = part_depth(k), parts = ceil_div(k, depth);
  thread_local std::vector<float> part;
  for (std::int64_t p = 0; p < parts; ++p) {
    const std::int64_t k0 = p * depth, kp = std::min(k, k0 + depth) - k0;
    if (p == 0) {
      multiply(k0, kp, y, ldy);
      continue;
    }
    part.resize(static_cast<std::size_t>(rows * cols));
    multiply(k0, kp, part.data(), cols);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) y[r * ldy + c] += part[static_cast<std::size_t>(r * cols + c)];
  }
}

}  // namespace

bool tile_in_place(std::int64_t rows, std::int64_t cols, std::int64_t k) {
  if (k <= kSmallProductDepth) return small_product_applies(rows, cols, k);
  return small_product_work() == kWideSmallProductWork && small_product_applies(rows, cols, part_depth(k));
}

void PackedPanels::pack(std::int64_t k, std::int64_t cols, const float* b, std::int64_t ldb, std::int64_t max_rows) {
  k_ = k;
  cols_ = cols;
  b_ = b;
  ldb_ = ldb;
  packed_ = max_rows >= block_rows() && small_product_applies(max_rows, cols, part_depth(k));
  if (!packed_) return;
  data_.resize(static_cast<std::size_t>(k * cols));
  pack_panels(k, cols, b, ldb, data_.data());
}

void product_in_place(std::int64_t rows, const float* a, std::int64_t lda, const PackedPanels& b, float* y,
                      std::int64_t ldy) {
  const std::int64_t k = b.depth(), cols = b.cols();
  if (!b.packed() || rows < block_rows())
    return product_in_place(false, false, rows, cols, k, a, lda, b.b(), b.ldb(), y, ldy);
  TCTL_CHECK(small_product_applies(rows, cols, part_depth(k)), "a packed product of more rows than packed for");
  sum_parts(rows, cols, k, y, ldy, [&](std::int64_t k0, std::int64_t kp, float* out, std::int64_t ldo) {
    packed_product(rows, cols, k, k0, kp, a + k0, lda, b.data(), out, ldo);
  });
}

void product_in_place(bool ta, bool tb, std::int64_t rows, std::int64_t cols, std::int64_t k, const float* a,
                      std::int64_t lda, const float* b, std::int64_t ldb, float* y, std::int64_t ldy) {
  if (!small_product_applies(rows, cols, part_depth(k))) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(rows),
                static_cast<int>(cols), static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb),
                0.0f, y, static_cast<int>(ldy));
    return;
  }
  product_by_parts(ta, tb, rows, cols, k, a, lda, b, ldb, y, ldy);
}

void product_by_parts(bool ta, bool tb, std::int64_t rows, std::int64_t cols, std::int64_t k, const float* a,
                      std::int64_t lda, const float* b, std::int64_t ldb, float* y, std::int64_t ldy) {
  sum_parts(rows, cols, k, y, ldy, [&](std::int64_t k0, std::int64_t kp, float* out, std::int64_t ldo) {
    // Part p of the depth: columns k0.. of op(a) and rows k0.. of op(b), wherever their transposes put them.
    small_product(ta, tb, rows, cols, kp, ta ? a + k0 * lda : a + k0, lda, tb ? b + k0 : b + k0 * ldb, ldb, out, ldo);
  });
}

}  // namespace tctl::cpu
