// Conv2D on NHWC float32 inputs with [kh, kw, C, F] kernels (Keras' layout), by im2col and OpenBLAS sgemm,
// and its two gradients: Conv2DInputGrad (col2im of dY K^T) and Conv2DKernelGrad (im2col^T dY).
#include <cblas.h>

#include <cstring>
#include <vector>

#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/window.h"

namespace tctl::cpu {
namespace {

// Output rows (pixels) per im2col + sgemm block in the forward pass. As in MatMul, the split is fixed and
// not derived from the thread count, so every output comes from the same call shape on any pool size.
constexpr std::int64_t kConvRowBlock = 64;
// Rows per partial kernel gradient: at least this many, and few enough that there are at most
// kMaxKernelGradPartials partials; both depend on the shape only, and the partials are summed in order.
constexpr std::int64_t kKernelGradMinRows = 256;
constexpr std::int64_t kMaxKernelGradPartials = 64;
// Multiply-adds below which a task is not worth handing to another thread. It only groups blocks into
// tasks; the blocks themselves, and so the results, stay the same.
constexpr std::int64_t kMinTaskWork = std::int64_t{1} << 17;

std::int64_t grain_for(std::int64_t work_per_item) { return std::max<std::int64_t>(1, kMinTaskWork / std::max<std::int64_t>(work_per_item, 1)); }

Attrs window_attrs(const Attrs& conv, std::int64_t kh, std::int64_t kw) {
  return Attrs{{"strides", conv.ints("strides")}, {"padding", conv.s("padding")}, {"window", std::vector<std::int64_t>{kh, kw}}};
}

// Writes the patches of output pixels [first, first + rows) (counted over the whole batch) as rows of
// kh * kw * C values in (i, j, c) order, the order of the kernel's rows; padding reads as zero.
void im2col_rows(const float* x, const WindowGeometry& g, std::int64_t first, std::int64_t rows, float* cols) {
  const std::int64_t c = g.channels, kh = g.h.window, kw = g.w.window;
  const std::int64_t pixels = g.out_pixels();
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t n = (first + r) / pixels, p = (first + r) % pixels;
    const std::int64_t oh = p / g.w.out, ow = p % g.w.out;
    float* out = cols + r * kh * kw * c;
    for (std::int64_t i = 0; i < kh; ++i) {
      const std::int64_t ih = oh * g.h.stride - g.h.pad_before + i;
      for (std::int64_t j = 0; j < kw; ++j, out += c) {
        const std::int64_t iw = ow * g.w.stride - g.w.pad_before + j;
        if (ih < 0 || ih >= g.h.in || iw < 0 || iw >= g.w.in) {
          std::memset(out, 0, static_cast<std::size_t>(c) * sizeof(float));
          continue;
        }
        std::memcpy(out, x + ((n * g.h.in + ih) * g.w.in + iw) * c, static_cast<std::size_t>(c) * sizeof(float));
      }
    }
  }
}

TensorSpec conv2d_infer(const InferContext& c) {
  c.expect_rank(0, 4);
  c.expect_rank(1, 4);
  c.expect_dtype(0, DType::kF32);
  c.expect_dtype(1, DType::kF32);
  const Shape& x = c.shape(0);
  const Shape& k = c.shape(1);
  if (x[3] >= 0 && k[2] != x[3])
    c.fail("kernel " + k.to_string() + " expects " + std::to_string(k[2]) + " input channels but the input " + x.to_string() +
           " has " + std::to_string(x[3]));
  const WindowGeometry g = infer_window(c, x, k[0], k[1], "kernel");
  return {DType::kF32, Shape{x[0], g.h.out, g.w.out, k[3]}};
}

void conv2d_cpu(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& k = ctx.input(1);
  const WindowGeometry g = window_geometry(ctx.attrs(), x.shape(), k.shape()[0], k.shape()[1]);
  const std::int64_t depth = k.shape()[0] * k.shape()[1] * g.channels, filters = k.shape()[3];
  const std::int64_t rows = g.batch * g.out_pixels();
  const float* px = x.data<float>();
  const float* pk = k.data<float>();
  float* py = ctx.output().mutable_data<float>();
  const std::int64_t blocks = (rows + kConvRowBlock - 1) / kConvRowBlock;
  ctx.parallel_for(blocks, grain_for(kConvRowBlock * depth * filters), [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> cols(static_cast<std::size_t>(kConvRowBlock * depth));
    for (std::int64_t blk = begin; blk < end; ++blk) {
      const std::int64_t first = blk * kConvRowBlock, n = std::min(kConvRowBlock, rows - first);
      im2col_rows(px, g, first, n, cols.data());
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(filters),
                  static_cast<int>(depth), 1.0f, cols.data(), static_cast<int>(depth), pk, static_cast<int>(filters), 0.0f,
                  py + first * filters, static_cast<int>(filters));
    }
  });
}

// Inputs: dy [N, Ho, Wo, F], kernel, x (for its shape). One image per task: each image's dx is summed by
// one thread in a fixed order, so overlapping windows add up the same way on any thread count.
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
  ctx.parallel_for(g.batch, grain_for(pixels * depth * filters), [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> cols(static_cast<std::size_t>(pixels * depth));
    for (std::int64_t n = begin; n < end; ++n) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(pixels), static_cast<int>(depth),
                  static_cast<int>(filters), 1.0f, pdy + n * pixels * filters, static_cast<int>(filters), pk,
                  static_cast<int>(filters), 0.0f, cols.data(), static_cast<int>(depth));
      float* out = dx + n * image;
      std::fill(out, out + image, 0.0f);
      for (std::int64_t p = 0; p < pixels; ++p) {
        const std::int64_t oh = p / g.w.out, ow = p % g.w.out;
        const float* col = cols.data() + p * depth;
        for (std::int64_t i = 0; i < kh; ++i) {
          const std::int64_t ih = oh * g.h.stride - g.h.pad_before + i;
          for (std::int64_t j = 0; j < kw; ++j, col += c) {
            const std::int64_t iw = ow * g.w.stride - g.w.pad_before + j;
            if (ih < 0 || ih >= g.h.in || iw < 0 || iw >= g.w.in) continue;
            float* target = out + (ih * g.w.in + iw) * c;
            for (std::int64_t ch = 0; ch < c; ++ch) target[ch] += col[ch];
          }
        }
      }
    }
  });
}

TensorSpec conv2d_input_grad_infer(const InferContext& c) { return c.input(2); }

// Inputs: x, dy. The sum over all output pixels is cut into partials of fixed row ranges (by shape, not
// by thread count), each one sgemm, then added in range order.
void conv2d_kernel_grad_cpu(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& dy = ctx.input(1);
  const auto& window = ctx.attrs().ints("window");
  const WindowGeometry g = window_geometry(ctx.attrs(), x.shape(), window[0], window[1]);
  const std::int64_t depth = window[0] * window[1] * g.channels, filters = dy.shape()[3];
  const std::int64_t rows = g.batch * g.out_pixels(), size = depth * filters;
  const std::int64_t chunk =
      std::max(kKernelGradMinRows, (rows + kMaxKernelGradPartials - 1) / kMaxKernelGradPartials);
  const std::int64_t chunks = std::max<std::int64_t>(1, (rows + chunk - 1) / chunk);
  float* dk = ctx.output().mutable_data<float>();
  std::vector<float> partials(chunks > 1 ? static_cast<std::size_t>(chunks * size) : 0);
  const float* px = x.data<float>();
  const float* pdy = dy.data<float>();
  ctx.parallel_for(chunks, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> cols(static_cast<std::size_t>(std::min(chunk, rows) * depth));
    for (std::int64_t part = begin; part < end; ++part) {
      const std::int64_t first = part * chunk, n = std::min(chunk, rows - first);
      float* target = chunks > 1 ? partials.data() + part * size : dk;
      if (n <= 0) {
        std::fill(target, target + size, 0.0f);
        continue;
      }
      im2col_rows(px, g, first, n, cols.data());
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(depth), static_cast<int>(filters),
                  static_cast<int>(n), 1.0f, cols.data(), static_cast<int>(depth), pdy + first * filters,
                  static_cast<int>(filters), 0.0f, target, static_cast<int>(filters));
    }
  });
  if (chunks == 1) return;
  for_each_element(ctx, size, [&](std::int64_t i) {
    float s = partials[static_cast<std::size_t>(i)];
    for (std::int64_t part = 1; part < chunks; ++part) s += partials[static_cast<std::size_t>(part * size + i)];
    dk[i] = s;
  });
}

TensorSpec conv2d_kernel_grad_infer(const InferContext& c) {
  const auto& window = c.attrs().ints("window");
  return {DType::kF32, Shape{window[0], window[1], c.shape(0)[3], c.shape(1)[3]}};
}

std::vector<Output> conv2d_grad(GradBuilder& g) {
  const Shape& k = g.spec(g.x(1)).shape;
  const Attrs attrs = window_attrs(g.attrs(), k[0], k[1]);
  // The first layer's input gradient is dead work: made only when needed.
  Output dx = g.needs(0) ? g.op("Conv2DInputGrad", {g.dy(), g.x(1), g.x(0)}, attrs) : Output{};
  return {dx, g.needs(1) ? g.op("Conv2DKernelGrad", {g.x(0), g.dy()}, attrs) : Output{}};
}

}  // namespace

TCTL_REGISTER_OP({.name = "Conv2D", .num_inputs = 2, .infer = conv2d_infer, .grad = conv2d_grad, .cpu = conv2d_cpu});
TCTL_REGISTER_OP({.name = "Conv2DInputGrad", .num_inputs = 3, .infer = conv2d_input_grad_infer, .cpu = conv2d_input_grad_cpu});
TCTL_REGISTER_OP({.name = "Conv2DKernelGrad", .num_inputs = 2, .infer = conv2d_kernel_grad_infer, .cpu = conv2d_kernel_grad_cpu});

}  // namespace tctl::cpu
