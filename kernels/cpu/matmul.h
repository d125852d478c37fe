// The CPU's products, for kernels that multiply buffers of their own (kernels/cpu/matmul.cpp): tiled the way
// MatMul's are, so a product's bits depend only on its shapes, never on the thread count.
#pragma once

#include <cstdint>

#include "core/kernel_context.h"

namespace tctl::cpu {

// y = op(a) op(b): op(a) rows x depth, op(b) depth x cols, y rows x cols with row stride cols; a and b row
// major with row strides lda and ldb, transposed where ta and tb say.
struct Product {
  bool ta = false, tb = false;
  std::int64_t rows = 0, cols = 0, depth = 0;
  const float* a = nullptr;
  std::int64_t lda = 0;
  const float* b = nullptr;
  std::int64_t ldb = 0;
  float* y = nullptr;
};

// Computes the product on the intra-op pool, in sgemm tiles or in place (small_product.h).
void multiply(const KernelContext& ctx, const Product& p);

}  // namespace tctl::cpu
