// CUDA kernels of Conv2D and FusedConv2D on NHWC float32 inputs with [kh, kw, C, F] kernels, and of their
// gradients Conv2DInputGrad (dY K^T by cuBLAS, then col2im) and Conv2DKernelGrad (im2col^T dY); definitions
// in core/ops/conv.cpp, CPU kernels in kernels/cpu/conv.cpp.
//
// Kernels with few taps (kh * kw * C <= 32) are summed directly, as on the CPU and in its order (taps in
// (i, j, c) order; the kernel gradient over the same blocks of images, then the blocks in order), so Conv2D,
// FusedConv2D and Conv2DKernelGrad give the CPU's bits there. Larger ones go through im2col and cuBLAS sgemm
// (exact FP32 products unless the run allows TF32), whose summation order differs from OpenBLAS's, as does
// every Conv2DInputGrad's product; its col2im then adds each input's parts in the CPU's order, one thread per
// input element, without atomics. The im2col buffer is cut into chunks of at most 256 MiB.
//
// With TCTL_CUDA_CUDNN=1, cuDNN runs what it can take (cudnn_conv.h) in place of im2col and cuBLAS, and in
// place of the direct sums under a mixed precision policy, where those would keep the small convolutions in
// float32; in float32 the direct sums keep the CPU's bits.
#include <cublas_v2.h>

#include <algorithm>
#include <climits>

#include "core/errors.h"
#include "core/op_registry.h"
#include "core/ops/fused.h"
#include "kernels/cuda/conv_util.cuh"
#include "kernels/cuda/cudnn_conv.h"

namespace tctl::cuda {
namespace {

// kernels/cpu/conv.cpp's limit of the direct sums; its cut of the direct kernel gradient into partials is
// conv_row_blocks (core/ops/window.h): the same numbers give the same bits.
constexpr std::int64_t kDirectDepth = 32;
constexpr std::int64_t kScratchFloats = kConvScratchBytes / sizeof(float);

std::int64_t depth_of(const WindowGeometry& g) { return g.h.window * g.w.window * g.channels; }

// Whether the direct sums, which give the CPU's bits, run a convolution of this depth: in float32 only, so that
// a reduced compute type reaches cuDNN there too.
bool direct_first(const KernelContext& ctx, std::int64_t depth) {
  return depth <= kDirectDepth && ctx.compute_type() == ComputeType::kF32;
}

Tensor scratch(const KernelContext& ctx, std::int64_t floats) {
  return Tensor::empty(DType::kF32, Shape{floats}, &ctx.device());
}

// How many units (rows or images) of `floats` floats each fit the im2col budget; at least one.
std::int64_t chunk_of(std::int64_t units, std::int64_t floats) {
  return std::clamp<std::int64_t>(kScratchFloats / std::max<std::int64_t>(floats, 1), 1,
                                  std::max<std::int64_t>(units, 1));
}

// c[m, n] = op(a) op(b) + beta c, all row-major and contiguous (row_major_gemm).
void gemm(const KernelContext& ctx, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
          const float* b, float beta, float* c) {
  TCTL_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX, "a convolution's product too large for cuBLAS");
  row_major_gemm(ctx, m, n, k, GemmOperand{a, ta ? m : k, ta}, GemmOperand{b, tb ? k : n, tb}, beta, c, n);
}

// Input element (ih, iw, c) of image n, or 0 in the padding.
__device__ float input_at(const float* x, const WindowGeometry& g, std::int64_t n, std::int64_t ih, std::int64_t iw,
                          std::int64_t c) {
  if (ih < 0 || ih >= g.h.in || iw < 0 || iw >= g.w.in) return 0.0f;
  return x[((n * g.h.in + ih) * g.w.in + iw) * g.channels + c];
}

// The top-left corner, in input coordinates, of the window of output pixel p (counted over the batch).
struct Corner {
  std::int64_t n, ih, iw;
};
__device__ Corner corner_of(const WindowGeometry& g, std::int64_t p) {
  const std::int64_t per_image = g.h.out * g.w.out, q = p % per_image;
  return {p / per_image, q / g.w.out * g.h.stride - g.h.pad_before, q % g.w.out * g.w.stride - g.w.pad_before};
}

// y[p, f] = activation(sum over taps t in (i, j, c) order of x_t k[t, f] + bias[f]), one thread per output.
// The products and sums are rounded apart (no FMA), as on the CPU; padded taps add 0 * k, as there.
struct DirectConv {
  const float* x;
  const float* k;
  const float* bias;  // null for Conv2D
  float* y;
  WindowGeometry g;
  std::int64_t filters;
  bool relu;
  __device__ void operator()(std::int64_t o) const {
    const std::int64_t f = o % filters;
    const Corner at = corner_of(g, o / filters);
    float acc = 0.0f;
    const float* kf = k + f;
    for (std::int64_t i = 0; i < g.h.window; ++i)
      for (std::int64_t j = 0; j < g.w.window; ++j)
        for (std::int64_t c = 0; c < g.channels; ++c, kf += filters)
          acc = __fadd_rn(acc, __fmul_rn(input_at(x, g, at.n, at.ih + i, at.iw + j, c), *kf));
    if (!bias) {
      y[o] = acc;
      return;
    }
    const float v = acc + bias[f];
    y[o] = relu && !(v > 0.0f) ? 0.0f : v;
  }
};

// cols[r, t] = tap t of output pixel first + r's window, t in (i, j, c) order: the rows of the kernel.
struct Im2col {
  const float* x;
  float* cols;
  WindowGeometry g;
  std::int64_t first;
  __device__ void operator()(std::int64_t e) const {
    const std::int64_t depth = g.h.window * g.w.window * g.channels, t = e % depth;
    const std::int64_t c = t % g.channels, j = t / g.channels % g.w.window, i = t / (g.channels * g.w.window);
    const Corner at = corner_of(g, first + e / depth);
    cols[e] = input_at(x, g, at.n, at.ih + i, at.iw + j, c);
  }
};

// dx[e] for the images of a chunk: the parts cols[(m, oh, ow), (i, j, c)] of every window that covers the
// element, added in output order (oh, then ow), as the CPU's col2im adds them.
struct Col2im {
  const float* cols;
  float* dx;
  WindowGeometry g;
  __device__ void operator()(std::int64_t e) const {
    const std::int64_t c = e % g.channels, iw = e / g.channels % g.w.in, ih = e / (g.channels * g.w.in) % g.h.in;
    const std::int64_t m = e / (g.channels * g.w.in * g.h.in);
    const std::int64_t depth = g.h.window * g.w.window * g.channels;
    const OutRange rows = covering(g.h, ih), columns = covering(g.w, iw);
    float sum = 0.0f;
    for (std::int64_t oh = rows.first; oh < rows.last; ++oh)
      for (std::int64_t ow = columns.first; ow < columns.last; ++ow) {
        const std::int64_t i = ih - (oh * g.h.stride - g.h.pad_before), j = iw - (ow * g.w.stride - g.w.pad_before);
        sum += cols[((m * g.h.out + oh) * g.w.out + ow) * depth + (i * g.w.window + j) * g.channels + c];
      }
    dx[e] = sum;
  }
};

// Kernel-gradient partial [b, t, f] (one thread each): tap t times dy[., f], summed over the output pixels
// of block b's images in order, from zero, rounded apart, as kernels/cpu/conv.cpp's kernel_grad_direct.
struct DirectKernelGrad {
  const float* x;
  const float* dy;
  float* partials;
  WindowGeometry g;
  std::int64_t filters, block_images;
  __device__ void operator()(std::int64_t o) const {
    const std::int64_t depth = g.h.window * g.w.window * g.channels, f = o % filters, t = o / filters % depth;
    const std::int64_t c = t % g.channels, j = t / g.channels % g.w.window, i = t / (g.channels * g.w.window);
    const std::int64_t first = o / (filters * depth) * block_images;
    const std::int64_t end = first + block_images < g.batch ? first + block_images : g.batch;
    const float* d = dy + first * g.h.out * g.w.out * filters + f;
    float acc = 0.0f;
    for (std::int64_t n = first; n < end; ++n)
      for (std::int64_t oh = 0; oh < g.h.out; ++oh) {
        const std::int64_t ih = oh * g.h.stride - g.h.pad_before + i;
        for (std::int64_t ow = 0; ow < g.w.out; ++ow, d += filters)
          acc = __fadd_rn(acc, __fmul_rn(input_at(x, g, n, ih, ow * g.w.stride - g.w.pad_before + j, c), *d));
      }
    partials[o] = acc;
  }
};

// dk[e] = the partials' sum in block order, as the CPU adds them.
struct SumPartials {
  const float* partials;
  float* dk;
  std::int64_t size, count;
  __device__ void operator()(std::int64_t e) const {
    float s = partials[e];
    for (std::int64_t b = 1; b < count; ++b) s += partials[b * size + e];
    dk[e] = s;
  }
};

struct AddBias {
  float* y;
  const float* bias;
  std::int64_t filters;
  bool relu;
  __device__ void operator()(std::int64_t e) const {
    const float v = y[e] + bias[e % filters];
    y[e] = relu && !(v > 0.0f) ? 0.0f : v;
  }
};

struct Zero {
  float* p;
  __device__ void operator()(std::int64_t e) const { p[e] = 0.0f; }
};

// Calls fn(first, n, patches) for each chunk of at most chunk_of(rows, depth) output rows, in order, once
// the chunk's im2col patches of x are queued in `patches` (one scratch buffer, reused by every chunk: the
// stream runs each chunk's product before the next im2col overwrites it).
template <class F>
void for_each_patch_chunk(KernelContext& ctx, const float* x, const WindowGeometry& g, std::int64_t rows,
                          std::int64_t depth, F fn) {
  const std::int64_t chunk = chunk_of(rows, depth);
  const Tensor cols = scratch(ctx, chunk * depth);
  float* pc = static_cast<float*>(cols.raw_mutable_data());
  for (std::int64_t first = 0; first < rows; first += chunk) {
    const std::int64_t n = std::min(chunk, rows - first);
    launch_each(ctx, n * depth, Im2col{x, pc, g, first});
    fn(first, n, static_cast<const float*>(pc));
  }
}

// The convolution of input 0 by kernel 1, then, when `bias` is set, the bias and the activation.
void convolve(KernelContext& ctx, const float* bias, bool relu) {
  const Tensor& k = ctx.input(1);
  const WindowGeometry g = window_geometry(ctx.attrs(), ctx.input(0).shape(), k.shape()[0], k.shape()[1]);
  const std::int64_t depth = depth_of(g), filters = k.shape()[3], rows = g.batch * g.h.out * g.w.out;
  const float* x = in<float>(ctx, 0);
  float* y = out<float>(ctx);
  if (!direct_first(ctx, depth) && cudnn_conv(ctx, ConvPass::kForward, g, filters, x, in<float>(ctx, 1), y)) {
    if (bias) launch_each(ctx, rows * filters, AddBias{y, bias, filters, relu});
    return;
  }
  if (depth <= kDirectDepth || rows * filters == 0) {
    launch_each(ctx, rows * filters, DirectConv{x, in<float>(ctx, 1), bias, y, g, filters, relu});
    return;
  }
  for_each_patch_chunk(ctx, x, g, rows, depth, [&](std::int64_t first, std::int64_t n, const float* pc) {
    gemm(ctx, false, false, n, filters, depth, pc, in<float>(ctx, 1), 0.0f, y + first * filters);
  });
  if (bias) launch_each(ctx, rows * filters, AddBias{y, bias, filters, relu});
}

void conv2d_cuda(KernelContext& ctx) { convolve(ctx, nullptr, false); }

// FusedConv2D(x, kernel, bias): activation(conv(x, kernel) + bias), with the bits of Conv2D, BiasAdd and
// Relu apart.
void fused_conv2d_cuda(KernelContext& ctx) { convolve(ctx, in<float>(ctx, 2), fused_relu(ctx.attrs())); }

// Inputs: dy [N, Ho, Wo, F], kernel, x (for its shape). Chunks of whole images, so that col2im finds every
// window of an image in the chunk's patch gradients.
void conv2d_input_grad_cuda(KernelContext& ctx) {
  const Tensor& k = ctx.input(1);
  const WindowGeometry g = window_geometry(ctx.attrs(), ctx.input(2).shape(), k.shape()[0], k.shape()[1]);
  const std::int64_t depth = depth_of(g), filters = k.shape()[3], pixels = g.h.out * g.w.out;
  const std::int64_t image = g.h.in * g.w.in * g.channels;
  float* dx = out<float>(ctx);
  if (g.batch * image == 0 || pixels * filters == 0) {  // no window or no filter: nothing flows back
    launch_each(ctx, g.batch * image, Zero{dx});
    return;
  }
  if (cudnn_conv(ctx, ConvPass::kInputGrad, g, filters, in<float>(ctx, 0), in<float>(ctx, 1), dx)) return;
  const std::int64_t chunk = chunk_of(g.batch, pixels * depth);
  const Tensor cols = scratch(ctx, chunk * pixels * depth);
  float* pc = static_cast<float*>(cols.raw_mutable_data());
  for (std::int64_t first = 0; first < g.batch; first += chunk) {
    const std::int64_t n = std::min(chunk, g.batch - first);
    gemm(ctx, false, true, n * pixels, depth, filters, in<float>(ctx, 0) + first * pixels * filters, in<float>(ctx, 1),
         0.0f, pc);
    launch_each(ctx, n * image, Col2im{pc, dx + first * image, g});
  }
}

void kernel_grad_direct(KernelContext& ctx, const WindowGeometry& g, std::int64_t filters, float* dk) {
  const std::int64_t size = depth_of(g) * filters;
  const RowBlocks blocks = conv_row_blocks(g.batch, g.h.out * g.w.out * size);  // blocks of whole images
  const DirectKernelGrad partial{in<float>(ctx, 0), in<float>(ctx, 1), dk, g, filters, blocks.rows};
  if (blocks.count == 1) {
    launch_each(ctx, size, partial);
    return;
  }
  const Tensor partials = scratch(ctx, blocks.count * size);
  DirectKernelGrad into = partial;
  into.partials = static_cast<float*>(partials.raw_mutable_data());
  launch_each(ctx, blocks.count * size, into);
  launch_each(ctx, size, SumPartials{into.partials, dk, size, blocks.count});
}

// Inputs: x, dy. Above the direct sums, the chunks' products add up in dk in chunk order.
void conv2d_kernel_grad_cuda(KernelContext& ctx) {
  const auto& window = ctx.attrs().ints("window");
  const WindowGeometry g = window_geometry(ctx.attrs(), ctx.input(0).shape(), window[0], window[1]);
  const std::int64_t depth = depth_of(g), filters = ctx.input(1).shape()[3], rows = g.batch * g.h.out * g.w.out;
  float* dk = out<float>(ctx);
  if (!direct_first(ctx, depth) &&
      cudnn_conv(ctx, ConvPass::kKernelGrad, g, filters, in<float>(ctx, 0), in<float>(ctx, 1), dk))
    return;
  if (depth <= kDirectDepth || depth * filters == 0) {
    kernel_grad_direct(ctx, g, filters, dk);
    return;
  }
  if (rows == 0) {
    launch_each(ctx, depth * filters, Zero{dk});
    return;
  }
  for_each_patch_chunk(ctx, in<float>(ctx, 0), g, rows, depth,
                       [&](std::int64_t first, std::int64_t n, const float* pc) {
                         gemm(ctx, true, false, depth, filters, n, pc, in<float>(ctx, 1) + first * filters,
                              first == 0 ? 0.0f : 1.0f, dk);
                       });
}

}  // namespace

TCTL_REGISTER_KERNELS("cuda", {"Conv2D", conv2d_cuda}, {"FusedConv2D", fused_conv2d_cuda},
                      {"Conv2DInputGrad", conv2d_input_grad_cuda}, {"Conv2DKernelGrad", conv2d_kernel_grad_cuda});

}  // namespace tctl::cuda
