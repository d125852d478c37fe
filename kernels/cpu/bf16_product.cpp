// bfloat16 products on AVX-512 BF16 (bf16_product.h). Operands are packed per block of k as pairs of
// bfloat16 in one 32-bit lane (the even k in the low half), the layout vdpbf16ps multiplies: b in panels of 32
// columns, each pair of k one row of the panel; a by blocks of 12 rows, each pair of k one vector of 16 lanes,
// a lane per row. Packing converts 16 or 32 floats per instruction; the kernels below are compiled for the instruction
// set by attribute, in any build, and run only where cpu_bf16_products() says the processor has it.
#include "kernels/cpu/bf16_product.h"

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "core/ceil_div.h"

#define TCTL_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace tctl::cpu {
// The kernels' own namespace: in a unity build (scripts/test.sh's sanitizer builds) their names meet those of
// the other kernel files, such as kernel_util.h's kLanes.
namespace bf16_kernels {
namespace {

// A block of a's rows: 12 x 2 vectors of sums stay in registers beside 2 vectors of b and a broadcast pair.
constexpr std::int64_t kRows = 12;
// A panel of b's columns: two vectors of 16 sums.
constexpr std::int64_t kPanel = 32;
// Pairs of k per block: a panel of b is then 32 KiB, read from the first-level cache by every block of rows
// (bench_bf16_products: a pass over the rows per 8 panels instead, for a b that outgrows the second-level
// cache, gained nothing on Zen 5).
constexpr std::int64_t kPairs = 256;
// The pairs of a packed block of a's rows lie kLanes apart: one vector of 16 lanes per pair, a lane per row.
constexpr std::int64_t kLanes = 16;

// The first n (at most 16) lanes.
__mmask16 first(std::int64_t n) {
  n = std::clamp<std::int64_t>(n, 0, 16);
  return static_cast<__mmask16>((1u << n) - 1u);
}

// 16 pairs of two rows of 16 floats: lane j holds lo[j] in its low half and hi[j] in its high half.
TCTL_BF16_TARGET inline __m512i interleave(__m512 lo, __m512 hi) {
  alignas(64) static const std::int16_t order[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                     8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i both = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));  // lo's 16, then hi's 16
  return _mm512_permutexvar_epi16(_mm512_load_si512(order), both);
}

// 16 pairs of n (at most 32) consecutive floats, zeros past them: lane j holds x[2j] and x[2j + 1].
TCTL_BF16_TARGET inline __m512i consecutive_pairs(const float* x, std::int64_t n) {
  const __m512 lo = _mm512_maskz_loadu_ps(first(n), x), hi = _mm512_maskz_loadu_ps(first(n - 16), x + 16);
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
}

// A 16 x 16 square of 32-bit lanes transposed in registers: lane j of row r goes to lane r of row j. Pairs
// within each 128-bit quarter first, then quarters: 64 shuffles for 256 lanes. The lane-by-lane spread it
// replaced held a 512 x 512 x 128 product to half this speed (bench/README.md, "bfloat16 products on the CPU").
// The shuffles' zero-masking forms with every lane kept: GCC 12's plain forms start from
// _mm512_undefined_epi32(), which its -Wuninitialized reports once inlined (at -O1, the sanitizer builds).
constexpr __mmask16 kAll = 0xffff;
TCTL_BF16_TARGET inline void transpose16(__m512i x[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_epi32(kAll, x[i], x[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_epi32(kAll, x[i], x[i + 1]);
  }
  // x[4g + m]'s quarter q: column 4q + m of rows 4g .. 4g + 3.
  for (int g = 0; g < 16; g += 4) {
    x[g] = _mm512_maskz_unpacklo_epi64(0xff, t[g], t[g + 2]);
    x[g + 1] = _mm512_maskz_unpackhi_epi64(0xff, t[g], t[g + 2]);
    x[g + 2] = _mm512_maskz_unpacklo_epi64(0xff, t[g + 1], t[g + 3]);
    x[g + 3] = _mm512_maskz_unpackhi_epi64(0xff, t[g + 1], t[g + 3]);
  }
  for (int m = 0; m < 4; ++m) {
    const __m512i even_low = _mm512_maskz_shuffle_i32x4(kAll, x[m], x[4 + m], 0x88);
    const __m512i odd_low = _mm512_maskz_shuffle_i32x4(kAll, x[m], x[4 + m], 0xdd);
    const __m512i even_high = _mm512_maskz_shuffle_i32x4(kAll, x[8 + m], x[12 + m], 0x88);
    const __m512i odd_high = _mm512_maskz_shuffle_i32x4(kAll, x[8 + m], x[12 + m], 0xdd);
    t[m] = _mm512_maskz_shuffle_i32x4(kAll, even_low, even_high, 0x88);
    t[8 + m] = _mm512_maskz_shuffle_i32x4(kAll, even_low, even_high, 0xdd);
    t[4 + m] = _mm512_maskz_shuffle_i32x4(kAll, odd_low, odd_high, 0x88);
    t[12 + m] = _mm512_maskz_shuffle_i32x4(kAll, odd_low, odd_high, 0xdd);
  }
  for (int i = 0; i < 16; ++i) x[i] = t[i];
}

// Rows k0 .. k0 + kc of b (kc x cols, row stride ldb; b points at row k0) into panels: out[(panel * kcp + p) *
// kPanel + c] holds rows 2p and 2p + 1 of column panel * kPanel + c, zeros past the columns and the rows.
TCTL_BF16_TARGET void pack_b_rows(const float* b, std::int64_t ldb, std::int64_t kc, std::int64_t cols,
                                  std::int64_t kcp, std::uint32_t* out) {
  for (std::int64_t c0 = 0; c0 < cols; c0 += kPanel)
    for (std::int64_t v = 0; v < kPanel; v += 16) {
      const __mmask16 mask = first(cols - c0 - v);
      std::uint32_t* to = out + (c0 / kPanel) * kcp * kPanel + v;
      for (std::int64_t p = 0; p < kcp; ++p) {
        const float* row = b + 2 * p * ldb + c0 + v;
        const __m512 lo = _mm512_maskz_loadu_ps(mask, row);
        const __m512 hi = 2 * p + 1 < kc ? _mm512_maskz_loadu_ps(mask, row + ldb) : _mm512_setzero_ps();
        _mm512_storeu_si512(to + p * kPanel, interleave(lo, hi));
      }
    }
}

// As pack_b_rows, for a b given transposed: column c of op(b) is row c of b (row stride ldb; b points at
// its column k0), whose consecutive floats are the pairs; 16 such rows are converted and transposed at once.
TCTL_BF16_TARGET void pack_b_columns(const float* b, std::int64_t ldb, std::int64_t kc, std::int64_t cols,
                                     std::int64_t kcp, std::uint32_t* out) {
  __m512i x[16];
  for (std::int64_t c0 = 0; c0 < cols; c0 += kPanel) {
    std::uint32_t* panel = out + (c0 / kPanel) * kcp * kPanel;
    for (std::int64_t v = 0; v < kPanel; v += 16)
      for (std::int64_t p0 = 0; p0 < kcp; p0 += 16) {
        for (std::int64_t c = 0; c < 16; ++c)
          x[c] = c0 + v + c < cols ? consecutive_pairs(b + (c0 + v + c) * ldb + 2 * p0, kc - 2 * p0)
                                   : _mm512_setzero_si512();
        transpose16(x);
        const std::int64_t n = std::min<std::int64_t>(16, kcp - p0);
        for (std::int64_t j = 0; j < n; ++j) _mm512_storeu_si512(panel + (p0 + j) * kPanel + v, x[j]);
      }
  }
}

// mr rows of op(a) over kc of k (a points at row r0, column k0; row stride lda): out[p * kLanes + r] holds
// columns 2p and 2p + 1 of row r. Each row's pairs are converted 16 at a time, and the rows transposed.
TCTL_BF16_TARGET void pack_a_rows(const float* a, std::int64_t lda, std::int64_t kc, std::int64_t mr, std::int64_t kcp,
                                  std::uint32_t* out) {
  __m512i x[16];
  for (std::int64_t p0 = 0; p0 < kcp; p0 += 16) {
    for (std::int64_t r = 0; r < 16; ++r)
      x[r] = r < mr ? consecutive_pairs(a + r * lda + 2 * p0, kc - 2 * p0) : _mm512_setzero_si512();
    transpose16(x);
    const std::int64_t n = std::min<std::int64_t>(16, kcp - p0);
    for (std::int64_t j = 0; j < n; ++j) _mm512_storeu_si512(out + (p0 + j) * kLanes, x[j]);
  }
}

// As pack_a_rows, for an a given transposed (row i of a is column i of op(a); a points at row k0, column r0):
// rows 2p and 2p + 1 of a are pair p of 16 columns at once.
TCTL_BF16_TARGET void pack_a_columns(const float* a, std::int64_t lda, std::int64_t kc, std::int64_t mr,
                                     std::int64_t kcp, std::uint32_t* out) {
  const __mmask16 mask = first(mr);
  for (std::int64_t p = 0; p < kcp; ++p) {
    const float* row = a + 2 * p * lda;
    const __m512 lo = _mm512_maskz_loadu_ps(mask, row);
    const __m512 hi = 2 * p + 1 < kc ? _mm512_maskz_loadu_ps(mask, row + lda) : _mm512_setzero_ps();
    _mm512_storeu_si512(out + p * kLanes, interleave(lo, hi));
  }
}

// R rows by one panel: pair p of row r is a[p * kLanes + r]. The sums start from zero, or from y
// where `add` (a later block of k continues each output's chain); columns past the masks are never written.
template <int R>
TCTL_BF16_TARGET void block(std::int64_t kcp, const std::uint32_t* a, const std::uint32_t* b, float* y,
                            std::int64_t ldy, __mmask16 m0, __mmask16 m1, bool add) {
  __m512 acc[R][2];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    acc[r][0] = add ? _mm512_maskz_loadu_ps(m0, y + r * ldy) : _mm512_setzero_ps();
    acc[r][1] = add ? _mm512_maskz_loadu_ps(m1, y + r * ldy + 16) : _mm512_setzero_ps();
  }
  for (std::int64_t p = 0; p < kcp; ++p) {
    const __m512bh b0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + p * kPanel));
    const __m512bh b1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + p * kPanel + 16));
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512bh x = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(a[p * kLanes + r])));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], x, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], x, b1);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(y + r * ldy, m0, acc[r][0]);
    _mm512_mask_storeu_ps(y + r * ldy + 16, m1, acc[r][1]);
  }
}

using BlockFn = void (*)(std::int64_t, const std::uint32_t*, const std::uint32_t*, float*, std::int64_t, __mmask16,
                         __mmask16, bool);
constexpr BlockFn kBlocks[kRows] = {block<1>, block<2>, block<3>, block<4>,  block<5>,  block<6>,
                                    block<7>, block<8>, block<9>, block<10>, block<11>, block<12>};

// This thread's packing buffers, grown as needed.
std::uint32_t* thread_buffer(std::vector<std::uint32_t>& buffer, std::int64_t n) {
  if (static_cast<std::int64_t>(buffer.size()) < n) buffer.resize(static_cast<std::size_t>(n));
  return buffer.data();
}

void product(bool ta, bool tb, std::int64_t rows, std::int64_t cols, std::int64_t k, const float* a, std::int64_t lda,
             const float* b, std::int64_t ldb, float* y, std::int64_t ldy) {
  if (k == 0) {
    for (std::int64_t r = 0; r < rows; ++r) std::fill(y + r * ldy, y + r * ldy + cols, 0.0f);
    return;
  }
  thread_local std::vector<std::uint32_t> a_buffer, b_buffer;
  const std::int64_t panels = ceil_div(cols, kPanel);
  const std::int64_t most_pairs = std::min(kPairs, ceil_div(k, std::int64_t{2}));
  std::uint32_t* packed_b = thread_buffer(b_buffer, panels * most_pairs * kPanel);
  std::uint32_t* packed_a = thread_buffer(a_buffer, most_pairs * kLanes);
  for (std::int64_t k0 = 0; k0 < k; k0 += 2 * kPairs) {
    const std::int64_t kc = std::min(2 * kPairs, k - k0), kcp = ceil_div(kc, std::int64_t{2});
    if (tb)
      pack_b_columns(b + k0, ldb, kc, cols, kcp, packed_b);
    else
      pack_b_rows(b + k0 * ldb, ldb, kc, cols, kcp, packed_b);
    for (std::int64_t r0 = 0; r0 < rows; r0 += kRows) {
      const std::int64_t mr = std::min(kRows, rows - r0);
      if (ta)
        pack_a_columns(a + k0 * lda + r0, lda, kc, mr, kcp, packed_a);
      else
        pack_a_rows(a + r0 * lda + k0, lda, kc, mr, kcp, packed_a);
      for (std::int64_t c0 = 0; c0 < cols; c0 += kPanel)
        kBlocks[mr - 1](kcp, packed_a, packed_b + (c0 / kPanel) * kcp * kPanel, y + r0 * ldy + c0, ldy,
                        first(cols - c0), first(cols - c0 - 16), k0 > 0);
    }
  }
}

}  // namespace
}  // namespace bf16_kernels

void bf16_product(bool ta, bool tb, std::int64_t rows, std::int64_t cols, std::int64_t k, const float* a,
                  std::int64_t lda, const float* b, std::int64_t ldb, float* y, std::int64_t ldy) {
  bf16_kernels::product(ta, tb, rows, cols, k, a, lda, b, ldb, y, ldy);
}

}  // namespace tctl::cpu
