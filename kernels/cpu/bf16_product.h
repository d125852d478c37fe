// The CPU's products under mixed_bfloat16 on a processor with AVX-512 BF16 (cpu_bf16_products,
// core/compute_type.h): y = op(a) op(b) with both operands rounded to bfloat16 (to nearest, ties to even) and
// the products summed in float32, as Keras' policy asks and as a GPU's tensor cores compute it. One vdpbf16ps
// adds two products of consecutive k to each of 16 float32 sums: twice the multiply-adds of a float32 FMA
// per instruction, from operands of half the bytes (bench/cpu_bf16.sh; bench/README.md,
// "bfloat16 products on the CPU").
//
// Each output is one chain over the pairs of k in order, an odd k's last pair holding a zero, whatever the
// tiling or the thread count: a shape's bits are the same on 1 or 8 threads. The instruction treats denormal
// operands as zero and flushes denormal sums to zero.
#pragma once

#include <cstdint>

namespace tctl::cpu {

// y = op(a) op(b), y row-major with row stride ldy; a holds op(a) (row stride lda), or when ta its
// transpose; b holds op(b) (row stride ldb), or when tb its transpose, as small_product's arguments
// (small_product.h). Only where cpu_bf16_products().
void bf16_product(bool ta, bool tb, std::int64_t rows, std::int64_t cols, std::int64_t k, const float* a,
                  std::int64_t lda, const float* b, std::int64_t ldb, float* y, std::int64_t ldy);

}  // namespace tctl::cpu
