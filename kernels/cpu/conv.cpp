// CPU kernels of Conv2D on NHWC float32 inputs with [kh, kw, C, F] kernels (Keras' layout), by im2col and
// OpenBLAS sgemm (summed directly for kernels with few taps; Winograd's F(4x4, 3x3) for 3x3 kernels at
// stride 1 on channels in multiples of 16, see winograd.h), of FusedConv2D, and of the two gradients:
// Conv2DInputGrad (col2im of dY K^T) and Conv2DKernelGrad (im2col^T dY) (definitions in core/ops/conv.cpp).
#include <cblas.h>

#include <array>
#include <cstring>
#include <vector>

#include "core/ceil_div.h"
#include "core/ops/fused.h"
#include "core/ops/window.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/winograd.h"

namespace tctl::cpu {
namespace {

// Every kernel here cuts its rows into conv_row_blocks (core/ops/window.h), the same on any thread count.
using Blocks = RowBlocks;
Blocks row_blocks(std::int64_t rows, std::int64_t floats_per_row) { return conv_row_blocks(rows, floats_per_row); }

// Below this many multiply-adds the direct forward pass and the kernel gradients (direct and im2col) run
// their blocks on one thread: the time a second one saves is lost to waking it and to moving data between
// the cores' caches, in this op or the next (on the digits CNN's first convolution, 590K, the op gained
// but the pooling after it and its kernel gradient lost more: `tensorctl profile configs/digits_cnn.json
// --ops --intra-op-threads 1,2`, figures in bench/README.md). im2col's forward pass and input gradient still
// split at any size, as does the kernel gradients' final sum of partials.
constexpr std::int64_t kSplitWork = std::int64_t{1} << 22;

// Per-thread scratch (kernel_util.h): a kernel may hold two at once, its im2col patches and its
// kernel-gradient partials, which the calling thread lends its helpers.
enum class Scratch { kPatches, kPartials, kCount };

float* scratch(std::int64_t floats, Scratch which = Scratch::kPatches) { return thread_scratch(floats, which); }

// Copies n floats, 16 at a time where it can: the runs here are short (3 floats for a 3x3 kernel on one
// channel), and a memcpy call per run cost more than the copy.
inline void copy_floats(const float* src, std::int64_t n, float* dst) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) std::memcpy(dst + i, src + i, 16 * sizeof(float));
  for (; i < n; ++i) dst[i] = src[i];
}

// The kernel rows of the patch of output pixel (oh, ow) of one image. In NHWC one kernel row of a patch,
// kw pixels of C channels, is one contiguous run of the input, clipped at the image's left and right edges.
// For each kernel row i, in order: fn(i, j0, j1, at), with kernel columns [j0, j1) inside the image and
// `at` the offset in floats, within the image, of column j0's first channel; `at` is -1 for a row that lies
// wholly in the padding.
template <class Fn>
void patch_rows(const WindowGeometry& g, std::int64_t oh, std::int64_t ow, Fn fn) {
  const std::int64_t c = g.channels, kw = g.w.window;
  const std::int64_t iw0 = ow * g.w.stride - g.w.pad_before;
  const std::int64_t j0 = std::max<std::int64_t>(0, -iw0), j1 = std::min(kw, g.w.in - iw0);
  for (std::int64_t i = 0; i < g.h.window; ++i) {
    const std::int64_t ih = oh * g.h.stride - g.h.pad_before + i;
    if (ih < 0 || ih >= g.h.in || j0 >= j1) {
      fn(i, j0, j1, std::int64_t{-1});
      continue;
    }
    fn(i, j0, j1, (ih * g.w.in + iw0 + j0) * c);
  }
}

// Output pixels counted over the whole batch, walked in order: image n, row oh, column ow.
struct PixelCursor {
  PixelCursor(const WindowGeometry& g, std::int64_t first)
      : g(g), n(first / g.out_pixels()), oh(first % g.out_pixels() / g.w.out), ow(first % g.w.out) {}
  void next() {
    if (++ow < g.w.out) return;
    ow = 0;
    if (++oh < g.h.out) return;
    oh = 0;
    ++n;
  }
  const float* image(const float* x) const { return x + n * g.h.in * g.w.in * g.channels; }

  const WindowGeometry& g;
  std::int64_t n, oh, ow;
};

// Writes the patches of output pixels [first, first + rows) (counted over the whole batch) as rows of
// kh * kw * C values in (i, j, c) order, the order of the kernel's rows; padding reads as zero.
void im2col_rows(const float* x, const WindowGeometry& g, std::int64_t first, std::int64_t rows, float* cols) {
  const std::int64_t c = g.channels, kh = g.h.window, run = g.w.window * c;
  PixelCursor px(g, first);
  for (std::int64_t r = 0; r < rows; ++r, px.next()) {
    float* patch = cols + r * kh * run;
    const float* image = px.image(x);
    patch_rows(g, px.oh, px.ow, [&](std::int64_t i, std::int64_t j0, std::int64_t j1, std::int64_t at) {
      float* out = patch + i * run;
      if (at < 0) {
        std::fill(out, out + run, 0.0f);
        return;
      }
      std::fill(out, out + j0 * c, 0.0f);
      copy_floats(image + at, (j1 - j0) * c, out + j0 * c);
      std::fill(out + j1 * c, out + run, 0.0f);
    });
  }
}

// A kernel with few taps per output pixel (kh * kw * C; 9 for a 3x3 kernel on one channel, 27 on RGB)
// makes a GEMM with a tiny inner dimension, where sgemm runs at a fraction of its speed (the digits CNN's
// first layer in `tensorctl profile --ops`). Such products are summed by the loops below instead.
constexpr std::int64_t kDirectDepth = 32;

// The direct sums below work on 16 filters at a time, held in kernel_util.h's vectors of the target's width:
// one zmm with AVX-512, two ymm with AVX2, four xmm otherwise. (A 16-float vector type on an AVX2 target is
// split by GCC through the stack, several times slower.) Each filter's sum runs in the same order at any
// width, so every build gives the same bits.
constexpr int kParts = 16 / kLanes;  // vectors per 16 filters

// One image zero-padded on every side its windows reach past, so each tap of each window sits at a fixed
// offset from the window's corner: the direct sums below read taps from a table, with no edge tests.
class PaddedImage {
 public:
  explicit PaddedImage(const WindowGeometry& g)
      : g_(g), rows_(padded(g.h)), cols_(padded(g.w)), taps_(g.h.window * g.w.window * g.channels) {
    TCTL_CHECK(taps_ <= kDirectDepth, "a direct convolution with " + std::to_string(taps_) + " taps");
    for (std::int64_t i = 0, t = 0; i < g.h.window; ++i)
      for (std::int64_t j = 0; j < g.w.window; ++j)
        for (std::int64_t c = 0; c < g.channels; ++c)
          offsets_[static_cast<std::size_t>(t++)] = (i * cols_ + j) * g.channels + c;
  }

  // Copies image n of x into this thread's padded buffer.
  void load(const float* x, std::int64_t n) {
    const std::int64_t c = g_.channels, row = cols_ * c, in_row = g_.w.in * c;
    data_ = scratch(rows_ * row);
    std::fill(data_, data_ + rows_ * row, 0.0f);
    const float* image = x + n * g_.h.in * in_row;
    for (std::int64_t h = 0; h < g_.h.in; ++h)
      std::copy(image + h * in_row, image + (h + 1) * in_row,
                data_ + (g_.h.pad_before + h) * row + g_.w.pad_before * c);
  }
  // The first tap of output pixel (oh, ow)'s window; tap t is at window(oh, ow)[offset(t)].
  const float* window(std::int64_t oh, std::int64_t ow) const {
    return data_ + (oh * g_.h.stride * cols_ + ow * g_.w.stride) * g_.channels;
  }
  std::int64_t offset(std::int64_t t) const { return offsets_[static_cast<std::size_t>(t)]; }
  std::int64_t taps() const { return taps_; }

 private:
  // Padded extent of one dimension: room for the padding before, the input, and the last window.
  static std::int64_t padded(const WindowDim& d) {
    return std::max(d.pad_before + d.in, (d.out - 1) * d.stride + d.window);
  }

  const WindowGeometry& g_;
  std::int64_t rows_, cols_, taps_;
  std::array<std::int64_t, kDirectDepth> offsets_{};
  float* data_ = nullptr;
};

// The direct sums' blocks: whole images, about 32K multiply-adds each, cut by shape alone (the kernel
// gradient's partials follow this cut, so its bits do not depend on the thread count).
Blocks image_blocks(const WindowGeometry& g, std::int64_t depth, std::int64_t filters) {
  return row_blocks(g.batch, g.out_pixels() * depth * filters);
}

// fn(image, n) for images n in [first, first + images), each loaded padded into this thread's buffer.
template <class Fn>
void for_each_padded(const float* x, const WindowGeometry& g, std::int64_t first, std::int64_t images, Fn fn) {
  PaddedImage image(g);
  for (std::int64_t n = first; n < first + images; ++n) {
    image.load(x, n);
    fn(image, n);
  }
}

// The outputs of images [first, first + images), summed directly: each output adds up its taps in
// (i, j, c) order, 16 filters at a time in a register, for 4 neighbouring pixels at once so their sums
// proceed side by side rather than wait on each other.
void convolve_direct(const float* x, const float* k, const WindowGeometry& g, std::int64_t filters, std::int64_t first,
                     std::int64_t images, float* y) {
  constexpr int kPixels = 4;
  const std::int64_t full = filters / 16 * 16;
  for_each_padded(x, g, first, images, [&](const PaddedImage& image, std::int64_t n) {
    const std::int64_t depth = image.taps();
    for (std::int64_t oh = 0; oh < g.h.out; ++oh) {
      for (std::int64_t ow = 0; ow < g.w.out; ow += kPixels) {
        const int count = static_cast<int>(std::min<std::int64_t>(kPixels, g.w.out - ow));
        const float* in[kPixels];
        float* out[kPixels];
        for (int u = 0; u < count; ++u) {
          in[u] = image.window(oh, ow + u);
          out[u] = y + ((n * g.h.out + oh) * g.w.out + ow + u) * filters;
        }
        for (std::int64_t f0 = 0; f0 < full; f0 += 16) {
          Floats acc[kPixels][kParts] = {};
          for (std::int64_t t = 0; t < depth; ++t) {
            Floats kv[kParts];
            for (int v = 0; v < kParts; ++v) kv[v] = load(k + t * filters + f0 + v * kLanes);
            const std::int64_t at = image.offset(t);
            for (int u = 0; u < kPixels; ++u)
              if (u < count)
                for (int v = 0; v < kParts; ++v) acc[u][v] += in[u][at] * kv[v];
          }
          for (int u = 0; u < count; ++u)
            for (int v = 0; v < kParts; ++v) store(out[u] + f0 + v * kLanes, acc[u][v]);
        }
        for (int u = 0; u < count; ++u) {
          for (std::int64_t f = full; f < filters; ++f) {
            float acc = 0.0f;
            for (std::int64_t t = 0; t < depth; ++t) acc += in[u][image.offset(t)] * k[t * filters + f];
            out[u][f] = acc;
          }
        }
      }
    }
  });
}

// The kernel gradient's sum over the output pixels of images [first, first + images) into `target`
// ([taps, filters]), pixel by pixel in order: row t gains tap t of the pixel's window times dy[pixel].
// Eight rows at a time (four on narrower vectors, whose 16 filters take two registers or more) stay in
// registers while the image's pixels pass.
void kernel_grad_direct(const float* x, const float* dy, const WindowGeometry& g, std::int64_t filters,
                        std::int64_t first, std::int64_t images, float* target) {
  constexpr int kRows = kParts == 1 ? 8 : 4;
  const std::int64_t full = filters / 16 * 16;
  std::fill(target, target + g.h.window * g.w.window * g.channels * filters, 0.0f);
  for_each_padded(x, g, first, images, [&](const PaddedImage& image, std::int64_t n) {
    const std::int64_t depth = image.taps();
    const float* dy_image = dy + n * g.out_pixels() * filters;
    for (std::int64_t f0 = 0; f0 < full; f0 += 16) {
      for (std::int64_t t0 = 0; t0 < depth; t0 += kRows) {
        const int rows = static_cast<int>(std::min<std::int64_t>(kRows, depth - t0));
        Floats acc[kRows][kParts] = {};
        std::int64_t at[kRows] = {};
        for (int u = 0; u < rows; ++u) {
          for (int v = 0; v < kParts; ++v) acc[u][v] = load(target + (t0 + u) * filters + f0 + v * kLanes);
          at[u] = image.offset(t0 + u);
        }
        for (std::int64_t oh = 0, p = 0; oh < g.h.out; ++oh) {
          for (std::int64_t ow = 0; ow < g.w.out; ++ow, ++p) {
            const float* in = image.window(oh, ow);
            Floats d[kParts];
            for (int v = 0; v < kParts; ++v) d[v] = load(dy_image + p * filters + f0 + v * kLanes);
            for (int u = 0; u < kRows; ++u)
              if (u < rows)
                for (int v = 0; v < kParts; ++v) acc[u][v] += in[at[u]] * d[v];
          }
        }
        for (int u = 0; u < rows; ++u)
          for (int v = 0; v < kParts; ++v) store(target + (t0 + u) * filters + f0 + v * kLanes, acc[u][v]);
      }
    }
    for (std::int64_t oh = 0, p = 0; full < filters && oh < g.h.out; ++oh) {
      for (std::int64_t ow = 0; ow < g.w.out; ++ow, ++p) {
        const float* in = image.window(oh, ow);
        const float* d = dy_image + p * filters;
        for (std::int64_t t = 0; t < depth; ++t)
          for (std::int64_t f = full; f < filters; ++f) target[t * filters + f] += in[image.offset(t)] * d[f];
      }
    }
  });
}

// The convolution of input 0 by kernel 1, block by block; `finish(first, n)` runs on output rows
// [first, first + n) right after their sgemm, by the same thread, while they are still in cache.
template <class Finish>
void convolve(KernelContext& ctx, Finish finish) {
  const Tensor& x = ctx.input(0);
  const Tensor& k = ctx.input(1);
  const WindowGeometry g = window_geometry(ctx.attrs(), x.shape(), k.shape()[0], k.shape()[1]);
  const std::int64_t depth = k.shape()[0] * k.shape()[1] * g.channels, filters = k.shape()[3];
  const std::int64_t rows = g.batch * g.out_pixels();
  const float* px = x.data<float>();
  const float* pk = k.data<float>();
  float* py = ctx.output().mutable_data<float>();
  if (winograd_applies(g, filters)) {
    winograd_forward(ctx, g, px, pk, filters, py, finish);
    return;
  }
  if (depth <= kDirectDepth) {
    // Every output is summed on its own, so here the cut changes no bits.
    const std::int64_t pixels = g.out_pixels();
    const Blocks blocks = image_blocks(g, depth, filters);
    const bool split = rows * depth * filters >= kSplitWork;
    ctx.parallel_for(blocks.count, split ? 1 : blocks.count, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t blk = begin; blk < end; ++blk) {
        const std::int64_t first = blk * blocks.rows, images = std::min(blocks.rows, g.batch - first);
        if (images <= 0) continue;
        convolve_direct(px, pk, g, filters, first, images, py);
        finish(first * pixels, images * pixels);
      }
    });
    return;
  }
  const Blocks blocks = row_blocks(rows, depth);
  ctx.parallel_for(blocks.count, 1, [&](std::int64_t begin, std::int64_t end) {
    float* cols = scratch(blocks.rows * depth);
    for (std::int64_t blk = begin; blk < end; ++blk) {
      const std::int64_t first = blk * blocks.rows, n = std::min(blocks.rows, rows - first);
      if (n <= 0) continue;
      im2col_rows(px, g, first, n, cols);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(filters),
                  static_cast<int>(depth), 1.0f, cols, static_cast<int>(depth), pk, static_cast<int>(filters), 0.0f,
                  py + first * filters, static_cast<int>(filters));
      finish(first, n);
    }
  });
}

void conv2d_cpu(KernelContext& ctx) {
  convolve(ctx, [](std::int64_t, std::int64_t) {});
}

// FusedConv2D(x, kernel, bias): activation(conv(x, kernel) + bias), activation "relu" or "linear"; a Conv2D
// layer in one node, with the bits of Conv2D, BiasAdd and Relu apart.
void fused_conv2d_cpu(KernelContext& ctx) {
  const bool relu = fused_relu(ctx.attrs());
  const float* bias = ctx.input(2).data<float>();
  float* py = ctx.output().mutable_data<float>();
  const std::int64_t filters = ctx.input(1).shape()[3];
  convolve(ctx, [&](std::int64_t first, std::int64_t n) {
    add_bias_activation(py + first * filters, filters, n, filters, bias, relu);
  });
}

// Inputs: dy [N, Ho, Wo, F], kernel, x (for its shape). Blocks of whole images: one sgemm gives the
// patch gradients dY K^T of the block, then each image's dx is summed by one thread in a fixed order, so
// overlapping windows add up the same way on any thread count.
void conv2d_input_grad_cpu(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& k = ctx.input(1);
  const WindowGeometry g = window_geometry(ctx.attrs(), ctx.input(2).shape(), k.shape()[0], k.shape()[1]);
  const std::int64_t kh = g.h.window, kw = g.w.window, c = g.channels;
  const std::int64_t depth = kh * kw * c, filters = k.shape()[3], pixels = g.out_pixels();
  const std::int64_t image = g.h.in * g.w.in * c;
  const float* pdy = dy.data<float>();
  const float* pk = k.data<float>();
  float* dx = ctx.output().mutable_data<float>();
  if (winograd_applies(g, filters)) {
    winograd_input_grad(ctx, g, pdy, pk, filters, dx);
    return;
  }
  const Blocks blocks = row_blocks(g.batch, pixels * depth);
  ctx.parallel_for(blocks.count, 1, [&](std::int64_t begin, std::int64_t end) {
    float* cols = scratch(blocks.rows * pixels * depth);
    for (std::int64_t blk = begin; blk < end; ++blk) {
      const std::int64_t first = blk * blocks.rows, images = std::min(blocks.rows, g.batch - first);
      if (images <= 0) continue;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(images * pixels), static_cast<int>(depth),
                  static_cast<int>(filters), 1.0f, pdy + first * pixels * filters, static_cast<int>(filters), pk,
                  static_cast<int>(filters), 0.0f, cols, static_cast<int>(depth));
      for (std::int64_t m = 0; m < images; ++m) {
        float* out = dx + (first + m) * image;
        std::fill(out, out + image, 0.0f);
        // col2im: each patch row's run inside the image adds back onto the input it was read from.
        for (std::int64_t p = 0; p < pixels; ++p) {
          const float* patch = cols + (m * pixels + p) * depth;
          patch_rows(g, p / g.w.out, p % g.w.out,
                     [&](std::int64_t i, std::int64_t j0, std::int64_t j1, std::int64_t at) {
                       if (at < 0) return;
                       const float* src = patch + (i * kw + j0) * c;
                       float* target = out + at;
                       for (std::int64_t t = 0; t < (j1 - j0) * c; ++t) target[t] += src[t];
                     });
        }
      }
    }
  });
}

// The kernel gradient by sgemm sums over every output pixel of the batch, a long inner dimension: it is cut
// into at most kKernelGradParts partials (by shape, not by thread count), each summed over its run of
// im2col blocks by sgemm accumulating into it, then the partials are added in order. (One partial per
// block, as before, wrote and reread the whole [taps, filters] gradient for every 128 KB of patches: the
// 32x32x3 CNN's conv 64-64 spent several times its forward product's time there; bench/conv_gemm.sh.)
constexpr std::int64_t kKernelGradParts = 8;

// Inputs: x, dy. The sum over all output pixels is cut into partials (by shape, not by thread count), then
// added in order.
void conv2d_kernel_grad_cpu(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& dy = ctx.input(1);
  const auto& window = ctx.attrs().ints("window");
  const WindowGeometry g = window_geometry(ctx.attrs(), x.shape(), window[0], window[1]);
  const std::int64_t depth = window[0] * window[1] * g.channels, filters = dy.shape()[3];
  if (winograd_applies(g, filters)) {
    winograd_kernel_grad(ctx, g, x.data<float>(), dy.data<float>(), filters, ctx.output().mutable_data<float>());
    return;
  }
  const std::int64_t rows = g.batch * g.out_pixels(), size = depth * filters;
  // With few taps the partials are sums over blocks of whole images (convolve's direct path), one each.
  const bool direct = depth <= kDirectDepth;
  const Blocks blocks = direct ? image_blocks(g, depth, filters) : row_blocks(rows, depth);
  const std::int64_t parts = direct ? blocks.count : std::min(blocks.count, kKernelGradParts);
  const std::int64_t blocks_per_part = ceil_div(blocks.count, parts);
  float* dk = ctx.output().mutable_data<float>();
  // The partials live in the calling thread's scratch until this call returns; helpers write their parts.
  float* partials = parts > 1 ? scratch(parts * size, Scratch::kPartials) : nullptr;
  const float* px = x.data<float>();
  const float* pdy = dy.data<float>();
  // The parts, and so the bits, are the same on one thread or several.
  const bool split = rows * depth * filters >= kSplitWork;
  ctx.parallel_for(parts, split ? 1 : parts, [&](std::int64_t begin, std::int64_t end) {
    float* cols = direct ? nullptr : scratch(blocks.rows * depth);
    for (std::int64_t part = begin; part < end; ++part) {
      float* target = parts > 1 ? partials + part * size : dk;
      if (direct) {
        const std::int64_t first = part * blocks.rows, n = std::min(blocks.rows, g.batch - first);
        if (n <= 0)
          std::fill(target, target + size, 0.0f);
        else
          kernel_grad_direct(px, pdy, g, filters, first, n, target);
        continue;
      }
      float beta = 0.0f;  // the part's first block writes it, the others add to it
      for (std::int64_t blk = part * blocks_per_part; blk < std::min(blocks.count, (part + 1) * blocks_per_part);
           ++blk) {
        const std::int64_t first = blk * blocks.rows, n = std::min(blocks.rows, rows - first);
        if (n <= 0) break;
        im2col_rows(px, g, first, n, cols);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(depth), static_cast<int>(filters),
                    static_cast<int>(n), 1.0f, cols, static_cast<int>(depth), pdy + first * filters,
                    static_cast<int>(filters), beta, target, static_cast<int>(filters));
        beta = 1.0f;
      }
      if (beta == 0.0f) std::fill(target, target + size, 0.0f);  // a part past the last row
    }
  });
  if (parts == 1) return;
  for_each_element(ctx, size, [&](std::int64_t i) {
    float s = partials[i];
    for (std::int64_t part = 1; part < parts; ++part) s += partials[part * size + i];
    dk[i] = s;
  });
}

}  // namespace

TCTL_REGISTER_KERNELS("cpu", {"Conv2D", conv2d_cpu}, {"FusedConv2D", fused_conv2d_cpu},
                      {"Conv2DInputGrad", conv2d_input_grad_cpu}, {"Conv2DKernelGrad", conv2d_kernel_grad_cpu});

}  // namespace tctl::cpu
