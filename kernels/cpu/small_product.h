// Products of one to three rows, as in inference at batch 1: y = a b with a of `rows` x k and b of k x
// cols, all row-major. OpenBLAS packs b into its own layout on every call, which at such sizes costs more
// than the arithmetic: 1.75 us for 1x64 by 64x128 on a Zen 3 EPYC (AVX2), where reading b in place takes
// 0.2 us. Each output here is one chain of fused multiply-adds over k in order, starting from zero; that is
// how OpenBLAS's kernels sum a product this thin on the processors measured (Zen 3's and SkylakeX's), so
// the bits are sgemm's. Where they would not be, nothing changes: the first use compares the two on
// probe shapes, one row count at a time, and where they differ those products stay with sgemm.
#pragma once

#include <cstdint>

namespace tctl::cpu {

// The most rows and the deepest k taken here. OpenBLAS restarts its sums every GEMM_Q steps of k (320 on
// Zen), so a deeper product would be summed in another order.
inline constexpr std::int64_t kSmallProductRows = 3;
inline constexpr std::int64_t kSmallProductDepth = 256;

// Whether small_product computes this product: a thin, shallow enough product, a build with fused
// multiply-adds in vectors (AVX2 and FMA, or AVX-512), and a probe that found sgemm's bits.
bool small_product_applies(std::int64_t rows, std::int64_t k);

// y = a b: `rows` rows of a (row stride lda) times b (k x cols, row stride ldb) into y (row stride ldy).
// Only where small_product_applies.
void small_product(std::int64_t rows, std::int64_t cols, std::int64_t k, const float* a, std::int64_t lda,
                   const float* b, std::int64_t ldb, float* y, std::int64_t ldy);

// The probe's verdict for products of `rows` rows (1 to kSmallProductRows): whether this processor's sgemm
// sums them as small_product does. False in a build without vector fused multiply-adds.
bool small_product_matches_blas(std::int64_t rows);

}  // namespace tctl::cpu
