// Products small enough to sum in place: y = op(a) op(b), with op(a) rows x k and op(b) k x cols, each
// output one chain of fused multiply-adds over k in order, starting from zero. OpenBLAS packs both operands
// into its own layout on every call, which at such sizes costs as much as the arithmetic or more (the digits
// MLP's first product at batch 1, 1x64 by 64x128: bench_workloads infer_b1).
//
// Every product of at most small_product_work() multiply-adds, transposed or not, is taken here on a
// processor with AVX2 and FMA (every_small_product), inference at batch 1 included. OpenBLAS sums some tiles of a
// product in one chain and others in two (even and odd k) and adds them, so these bits are not sgemm's;
// they are the one chain's, the same whatever the tiling and the thread count. Measured with AVX2 and with
// AVX-512 by bench_workloads mlp_digits_b32 against sgemm's products (bench/README.md, "Figures behind the
// constants in the code").
#pragma once

#include <cstdint>
#include <vector>

namespace tctl::cpu {

// The deepest k taken here: a deeper k no longer keeps a panel of b in the first-level cache.
inline constexpr std::int64_t kSmallProductDepth = 256;

// Whether this processor has AVX2 and FMA: where small_product takes every product of at
// most small_product_work() multiply-adds. Decided by the processor, not the build: a native and a portable
// build compute the same bits on one machine.
bool every_small_product();

// The most multiply-adds (rows x cols x k) of a product taken here where every_small_product():
// kSmallProductWork, or kWideSmallProductWork on a processor with AVX-512 whose OpenBLAS runs kernels of
// 8-float vectors (the Zen 5 build machines set OPENBLAS_CORETYPE=Haswell, since older OpenBLAS builds
// compute wrong results or crash on some AVX-512 processors; left to itself, 0.3.21 picks its Cooperlake
// kernels there). There the in-place products beat sgemm's at every size matmul.cpp's tiles take (512 x 512,
// by parts of at most kSmallProductDepth: 2^26), deep ones too (tile_in_place); where OpenBLAS has kernels as
// wide as ours (SkylakeX), or ours are as narrow as its (AVX2), sgemm wins beyond 2^21 (bench_workloads;
// bench/README.md, "Eleventh round" and "In-place products on Zen 5, every tile"). `bench_sgemm_limit
// --transformer-tiles` times both on each tile of a transformer block (bench/README.md, "Which tiles run in
// place on the AVX2 path").
inline constexpr std::int64_t kSmallProductWork = std::int64_t{1} << 21;
inline constexpr std::int64_t kWideSmallProductWork = std::int64_t{1} << 26;
std::int64_t small_product_work();

// Whether small_product's kernels work on vectors of 16 floats (a build for AVX-512), not 8.
bool small_product_wide();

// Whether small_product computes a product of these sizes, op(a) and op(b) transposed or not.
bool small_product_applies(std::int64_t rows, std::int64_t cols, std::int64_t k);

// Whether matmul.cpp's tile of these sizes is taken by product_in_place: where small_product_applies, and,
// where small_product_work() is the wide bound, a depth beyond kSmallProductDepth by parts (the 784-512-512-10
// MLP's first product and weight gradients, a transformer's feedforward and weight gradients).
bool tile_in_place(std::int64_t rows, std::int64_t cols, std::int64_t k);

// y = op(a) op(b), y row-major with row stride ldy. a holds op(a) (row stride lda), or when ta its transpose
// (k rows of `rows`); b holds op(b) (row stride ldb), or when tb its transpose (`cols` rows of k). Only where
// small_product_applies.
void small_product(bool ta, bool tb, std::int64_t rows, std::int64_t cols, std::int64_t k, const float* a,
                   std::int64_t lda, const float* b, std::int64_t ldb, float* y, std::int64_t ldy);

// y = op(a) op(b) as small_product computes it where small_product_applies to the product, a depth beyond
// kSmallProductDepth cut into parts whose products are added (a recurrent layer's d h_{t-1} = dG U^T over
// its 4 H gate columns, attention's P V over 512 steps); else sgemm's. For the many small products of one
// kernel call, where sgemm would pack its operands again each time (bench_workloads lstm_text_b64: 5 % of
// the step went to repacking U).
void product_in_place(bool ta, bool tb, std::int64_t rows, std::int64_t cols, std::int64_t k, const float* a,
                      std::int64_t lda, const float* b, std::int64_t ldb, float* y, std::int64_t ldy);

// product_in_place's in-place path whatever small_product_work() says: for `bench_sgemm_limit
// --transformer-tiles`, which times it against sgemm on tiles beyond the bound. Only where every_small_product().
void product_by_parts(bool ta, bool tb, std::int64_t rows, std::int64_t cols, std::int64_t k, const float* a,
                      std::int64_t lda, const float* b, std::int64_t ldb, float* y, std::int64_t ldy);

// A b that many products share (a recurrent layer's U or U^T at every step of every block of examples),
// copied once into panels of the in-place kernels' width: k x panel columns each, one after another, then the
// last columns as one k x rest block. A block of rows then reads its panel from consecutive addresses instead of
// a strided column of b (bench_workloads lstm_text_b64: the forward recurrence 35.3 -> 32.5 ms a step on Zen 3).
// The same bits as b unpacked: each output is one chain over k in order either way.
class PackedPanels {
 public:
  // Packs b (k x cols, row stride ldb) for products of at most max_rows rows, reusing the buffer of the last
  // pack; where the in-place kernels do not take them, or max_rows fill no block of rows, only remembers b.
  void pack(std::int64_t k, std::int64_t cols, const float* b, std::int64_t ldb, std::int64_t max_rows);
  std::int64_t depth() const { return k_; }
  std::int64_t cols() const { return cols_; }
  bool packed() const { return packed_; }
  const float* data() const { return data_.data(); }
  // b as it was given.
  const float* b() const { return b_; }
  std::int64_t ldb() const { return ldb_; }

 private:
  std::int64_t k_ = 0, cols_ = 0, ldb_ = 0;
  const float* b_ = nullptr;
  bool packed_ = false;
  std::vector<float> data_;
};

// product_in_place(false, false, rows, b.cols(), b.depth(), a, lda, b, ...), from b's panels where it is packed
// and the rows fill a block; fewer rows (inference at batch 1) read b as given, in blocks wider than a panel.
void product_in_place(std::int64_t rows, const float* a, std::int64_t lda, const PackedPanels& b, float* y,
                      std::int64_t ldy);

}  // namespace tctl::cpu
