// Winograd's minimal filtering F(4x4, 3x3) for the CPU's 3x3, stride-1 convolutions and both their
// gradients (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", 2015). A 6x6 input tile
// and the 3x3 kernel, each taken to a 6x6 transformed domain, multiply element by element; for 16 outputs
// that is 36 products per channel pair instead of 144. Across channels the element-wise products are 36
// matrix products, one per point of the transformed tile, and sgemm does those.
//
// The sums are those of im2col's in exact arithmetic; in float32 they round differently: the outputs lie
// within 2e-6 to 5e-6 of their size from a double-precision sum, where im2col and sgemm's lie within about
// 6e-7 (tests/kernels/conv_test.cpp).
// Every output comes from blocks cut by shape alone, so the bits are the same on any thread count.
#pragma once

#include <cstdint>
#include "core/function_ref.h"
#include "core/kernel_context.h"
#include "core/ops/window.h"

namespace tctl::cpu {

// Whether a convolution of this geometry with `filters` filters takes the Winograd path: a 3x3 kernel
// at stride 1, channels and filters in multiples of 16 (the transforms work on whole vectors of them), and
// outputs of at least 4x4 pixels (below that most of each 4x4 tile lies past the image's edge, and the
// products saved no longer pay for the transforms).
bool winograd_applies(const WindowGeometry& g, std::int64_t filters);

// y = conv(x, k) for a geometry that winograd_applies to; finish(first, n) runs on output pixels
// [first, first + n) (counted over the batch, as convolve's rows are) as soon as they are written.
void winograd_forward(const KernelContext& ctx, const WindowGeometry& g, const float* x, const float* k,
                      std::int64_t filters, float* y, FunctionRef<void(std::int64_t, std::int64_t)> finish);

// dx from dy: the forward convolution of dy by the kernel turned half a turn, its channels and filters
// swapped, with the padding that undoes the forward's.
void winograd_input_grad(const KernelContext& ctx, const WindowGeometry& g, const float* dy, const float* k,
                         std::int64_t filters, float* dx);

// dk from x and dy: the exact adjoint of winograd_forward (dy's tiles taken back through the output
// transform, multiplied with x's transformed tiles and summed over the batch, then taken back through the
// kernel transform), summed in at most 8 partials cut by shape (fewer where they would pass 64 MB) and
// added in order.
void winograd_kernel_grad(const KernelContext& ctx, const WindowGeometry& g, const float* x, const float* dy,
                          std::int64_t filters, float* dk);

}  // namespace tctl::cpu
