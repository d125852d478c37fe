// CPU kernels of MaxPool2D and AvgPool2D on NHWC float32 inputs, and of their gradients (definitions in
// core/ops/pooling.cpp). Padding never takes part: a max is over the input elements a window covers, and an
// average divides by their count, as TF does.
#include <bit>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/ops/window.h"
#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {
namespace {

// The input rows and columns window (oh, ow) covers, clipped to the input.
struct Span2D {
  std::int64_t h0, h1, w0, w1;
  std::int64_t count() const { return (h1 - h0) * (w1 - w0); }
};

Span2D window_span(const WindowGeometry& g, std::int64_t oh, std::int64_t ow) {
  const std::int64_t h = oh * g.h.stride - g.h.pad_before, w = ow * g.w.stride - g.w.pad_before;
  return {std::max<std::int64_t>(h, 0), std::min(h + g.h.window, g.h.in), std::max<std::int64_t>(w, 0),
          std::min(w + g.w.window, g.w.in)};
}

WindowGeometry pool_geometry(const KernelContext& ctx, const Shape& input) {
  const auto& window = ctx.attrs().ints("window");
  return window_geometry(ctx.attrs(), input, window[0], window[1]);
}

// Calls fn(span, x_image, y_pixel) for every output pixel of the batch, split over the intra-op pool.
// Each output is computed independently, so any split gives the same bits.
template <class Fn>
void for_each_window(KernelContext& ctx, Fn fn) {
  const Tensor& x = ctx.input(0);
  const WindowGeometry g = pool_geometry(ctx, x.shape());
  const float* px = x.data<float>();
  float* py = ctx.output().mutable_data<float>();
  const std::int64_t c = g.channels, pixels = g.out_pixels();
  const std::int64_t work = std::max<std::int64_t>(1, c * g.h.window * g.w.window);
  ctx.parallel_for(g.batch * pixels, std::max<std::int64_t>(1, kElementwiseGrain / work),
                   [&](std::int64_t begin, std::int64_t end) {
                     for (std::int64_t r = begin; r < end; ++r) {
                       const std::int64_t n = r / pixels, p = r % pixels;
                       fn(window_span(g, p / g.w.out, p % g.w.out), px + n * g.h.in * g.w.in * c, py + r * c, g);
                     }
                   });
}

// The usual pool, 2x2 at stride 2 over an input of even sides with no padding, on channels in whole
// vectors: each window's four pixels are loaded kLanes channels at a time and compared in registers, in the
// order and with the comparisons of the general loops (the same bits, NaN included), without their per-window
// bookkeeping, which was most of the digits CNN's pool gradients' time (`tensorctl profile
// configs/digits_cnn.json --ops`).
bool pool_2x2(const WindowGeometry& g) {
  return g.h.window == 2 && g.w.window == 2 && g.h.stride == 2 && g.w.stride == 2 && g.h.pad_before == 0 &&
         g.w.pad_before == 0 && g.h.in == 2 * g.h.out && g.w.in == 2 * g.w.out && g.w.out > 0 && g.channels > 0 &&
         g.channels % kLanes == 0;
}

// fn(at, row, pixel) for every window of a pool_2x2 geometry: `at` the offset of its top-left input element,
// `row` the input's row stride (both in floats), `pixel` its output pixel counted over the batch. Tasks of
// whole rows of windows, split over the intra-op pool.
template <class Fn>
void for_each_2x2(const KernelContext& ctx, const WindowGeometry& g, Fn fn) {
  const std::int64_t c = g.channels, row = g.w.in * c;
  ctx.parallel_for(g.batch * g.h.out, std::max<std::int64_t>(1, kElementwiseGrain / (4 * g.w.out * c)),
                   [&](std::int64_t begin, std::int64_t end) {
                     for (std::int64_t r = begin; r < end; ++r) {
                       const std::int64_t n = r / g.h.out, oh = r % g.h.out;
                       const std::int64_t at = ((n * g.h.in + 2 * oh) * g.w.in) * c;
                       for (std::int64_t ow = 0; ow < g.w.out; ++ow) fn(at + 2 * ow * c, row, r * g.w.out + ow);
                     }
                   });
}

using Ints = std::int32_t __attribute__((vector_size(kLanes * sizeof(float))));

void max_pool_2x2(KernelContext& ctx, const WindowGeometry& g) {
  const float* px = ctx.input(0).data<float>();
  float* py = ctx.output().mutable_data<float>();
  const std::int64_t c = g.channels;
  const Floats lowest = Floats{} - std::numeric_limits<float>::infinity();
  for_each_2x2(ctx, g, [&](std::int64_t at, std::int64_t row, std::int64_t pixel) {
    for (std::int64_t ch = 0; ch < c; ch += kLanes) {
      const float* x = px + at + ch;
      Floats y = lowest;
      for (const Floats v : {load(x), load(x + c), load(x + row), load(x + row + c)}) y = y < v ? v : y;
      store(py + pixel * c + ch, y);
    }
  });
}

void max_pool_grad_2x2(KernelContext& ctx, const WindowGeometry& g) {
  const float* dy = ctx.input(0).data<float>();
  const float* px = ctx.input(1).data<float>();
  float* dx = ctx.output().mutable_data<float>();
  const std::int64_t c = g.channels;
  for_each_2x2(ctx, g, [&](std::int64_t at, std::int64_t row, std::int64_t pixel) {
    for (std::int64_t ch = 0; ch < c; ch += kLanes) {
      const float* x = px + at + ch;
      const Floats a = load(x), b = load(x + c), cc = load(x + row), d = load(x + row + c);
      // The first maximum in scan order: a later element wins only by a strict >.
      Floats m = a;
      const Ints gb = b > m;
      m = gb ? b : m;
      const Ints gc = cc > m;
      m = gc ? cc : m;
      const Ints gd = d > m;
      const Ints grad = std::bit_cast<Ints>(0.0f + load(dy + pixel * c + ch));
      float* out = dx + at + ch;
      store(out, std::bit_cast<Floats>(grad & ~(gb | gc | gd)));
      store(out + c, std::bit_cast<Floats>(grad & gb & ~gc & ~gd));
      store(out + row, std::bit_cast<Floats>(grad & gc & ~gd));
      store(out + row + c, std::bit_cast<Floats>(grad & gd));
    }
  });
}

void max_pool_cpu(KernelContext& ctx) {
  if (const WindowGeometry g = pool_geometry(ctx, ctx.input(0).shape()); pool_2x2(g)) {
    max_pool_2x2(ctx, g);
    return;
  }
  for_each_window(ctx, [](const Span2D& s, const float* x, float* y, const WindowGeometry& g) {
    const std::int64_t c = g.channels;
    std::fill(y, y + c, -std::numeric_limits<float>::infinity());
    for (std::int64_t h = s.h0; h < s.h1; ++h)
      for (std::int64_t w = s.w0; w < s.w1; ++w) {
        const float* v = x + (h * g.w.in + w) * c;
        for (std::int64_t ch = 0; ch < c; ++ch) y[ch] = std::max(y[ch], v[ch]);
      }
  });
}

void avg_pool_cpu(KernelContext& ctx) {
  for_each_window(ctx, [](const Span2D& s, const float* x, float* y, const WindowGeometry& g) {
    const std::int64_t c = g.channels;
    std::fill(y, y + c, 0.0f);
    for (std::int64_t h = s.h0; h < s.h1; ++h)
      for (std::int64_t w = s.w0; w < s.w1; ++w) {
        const float* v = x + (h * g.w.in + w) * c;
        for (std::int64_t ch = 0; ch < c; ++ch) y[ch] += v[ch];
      }
    const float inv = 1.0f / static_cast<float>(s.count());
    for (std::int64_t ch = 0; ch < c; ++ch) y[ch] *= inv;
  });
}

// Per channel, the position and value of the running maximum of a window; one per task. The position is
// the element's number in the window's scan (row by row over the clipped window), a 32-bit integer like
// the floats beside it, so the selects below vectorise at the float width on AVX2 too (with 64-bit
// offsets AVX2 ran the digits CNN's first pool gradient several times slower than AVX-512).
struct ArgmaxScratch {
  explicit ArgmaxScratch(std::int64_t channels)
      : pos(static_cast<std::size_t>(channels)), value(static_cast<std::size_t>(channels)) {}
  std::vector<std::int32_t> pos;
  std::vector<float> value;
};

// Gradients take (dy, x) and scatter dy back into the windows. Windows overlap when the stride is below
// the pool size, so each image is one task summed in a fixed order: the same bits on any thread count.
template <class Fn>
void scatter_windows(KernelContext& ctx, Fn fn) {
  const float* dy = ctx.input(0).data<float>();
  const Tensor& x = ctx.input(1);
  const WindowGeometry g = pool_geometry(ctx, x.shape());
  const std::int64_t c = g.channels, pixels = g.out_pixels(), image = g.h.in * g.w.in * c;
  const float* px = x.data<float>();
  float* dx = ctx.output().mutable_data<float>();
  const std::int64_t work = std::max<std::int64_t>(1, pixels * c * g.h.window * g.w.window);
  ctx.parallel_for(g.batch, std::max<std::int64_t>(1, kElementwiseGrain / work),
                   [&](std::int64_t begin, std::int64_t end) {
                     ArgmaxScratch scratch(c);
                     for (std::int64_t n = begin; n < end; ++n) {
                       std::fill(dx + n * image, dx + (n + 1) * image, 0.0f);
                       for (std::int64_t p = 0; p < pixels; ++p)
                         fn(window_span(g, p / g.w.out, p % g.w.out), px + n * image, dy + (n * pixels + p) * c,
                            dx + n * image, g, scratch);
                     }
                   });
}

// Per channel, the scan position and value of window s's first maximum in scan order, into `best`.
// Channels innermost, like the memory, and selects instead of branches: on real data which element wins
// is unpredictable, and mispredicted branches cost several times the comparisons. A strict > keeps the
// first maximum (a NaN first in the window keeps it too).
inline void window_argmax(const Span2D& s, const float* x, const WindowGeometry& g, ArgmaxScratch& best) {
  const std::int64_t c = g.channels;
  const std::int64_t first = (s.h0 * g.w.in + s.w0) * c;
  std::int32_t* __restrict pos = best.pos.data();
  float* __restrict value = best.value.data();
  for (std::int64_t ch = 0; ch < c; ++ch) {
    pos[ch] = 0;
    value[ch] = x[first + ch];
  }
  std::int32_t k = 0;
  for (std::int64_t h = s.h0; h < s.h1; ++h)
    for (std::int64_t w = s.w0; w < s.w1; ++w, ++k) {
      const float* v = x + (h * g.w.in + w) * c;
      for (std::int64_t ch = 0; ch < c; ++ch) {
        const bool greater = v[ch] > value[ch];
        value[ch] = greater ? v[ch] : value[ch];
        pos[ch] = greater ? k : pos[ch];
      }
    }
}

// The offset within the image of channel 0 of scan position k of window s.
inline std::int64_t scan_offset(const Span2D& s, const WindowGeometry& g, std::int32_t k) {
  const std::int64_t cols = s.w1 - s.w0;
  return ((s.h0 + k / cols) * g.w.in + s.w0 + k % cols) * g.channels;
}

// Whether every input element lies in exactly one window: no overlap (stride equal to the pool size, the
// usual 2x2 pool with stride 2) and no element left over at the end.
bool windows_tile(const WindowDim& d) {
  return d.stride == d.window && (d.out - 1) * d.stride + d.window - d.pad_before >= d.in;
}

// MaxPool2DGrad where the windows tile the input: each element's gradient is written once, dy where the
// element is its window's first maximum and zero elsewhere, with no zero fill first and no scatter. The
// same values as scatter_windows adding dy onto zeros.
void max_pool_grad_tiled(KernelContext& ctx, const WindowGeometry& g) {
  const float* dy = ctx.input(0).data<float>();
  const float* px = ctx.input(1).data<float>();
  float* dx = ctx.output().mutable_data<float>();
  const std::int64_t c = g.channels, image = g.h.in * g.w.in * c;
  // Tasks of whole rows of windows, so the loop below steps along a row without dividing.
  const std::int64_t work = std::max<std::int64_t>(1, g.w.out * c * g.h.window * g.w.window);
  ctx.parallel_for(g.batch * g.h.out, std::max<std::int64_t>(1, kElementwiseGrain / work),
                   [&](std::int64_t begin, std::int64_t end) {
                     ArgmaxScratch best(c);
                     const std::int32_t* __restrict pos = best.pos.data();
                     for (std::int64_t row = begin; row < end; ++row) {
                       const std::int64_t n = row / g.h.out, oh = row % g.h.out;
                       const float* x = px + n * image;
                       float* out = dx + n * image;
                       for (std::int64_t ow = 0; ow < g.w.out; ++ow) {
                         const Span2D s = window_span(g, oh, ow);
                         const float* d = dy + ((n * g.h.out + oh) * g.w.out + ow) * c;
                         window_argmax(s, x, g, best);
                         std::int32_t k = 0;
                         for (std::int64_t h = s.h0; h < s.h1; ++h)
                           for (std::int64_t w = s.w0; w < s.w1; ++w, ++k) {
                             float* target = out + (h * g.w.in + w) * c;
                             // dy + 0 where the maximum was, +0 elsewhere, by a bit mask: GCC left the
                             // select as a branch for AVX2 (no masked loads), several times slower.
                             for (std::int64_t ch = 0; ch < c; ++ch) {
                               const std::uint32_t keep = 0u - static_cast<std::uint32_t>(pos[ch] == k);
                               target[ch] = std::bit_cast<float>(std::bit_cast<std::uint32_t>(0.0f + d[ch]) & keep);
                             }
                           }
                       }
                     }
                   });
}

// The whole gradient goes to the first maximum in scan order (row by row), as TF's does on ties.
void max_pool_grad_cpu(KernelContext& ctx) {
  const WindowGeometry g = pool_geometry(ctx, ctx.input(1).shape());
  if (pool_2x2(g)) {
    max_pool_grad_2x2(ctx, g);
    return;
  }
  if (windows_tile(g.h) && windows_tile(g.w)) {
    max_pool_grad_tiled(ctx, g);
    return;
  }
  scatter_windows(ctx, [](const Span2D& s, const float* x, const float* dy, float* dx, const WindowGeometry& g,
                          ArgmaxScratch& best) {
    window_argmax(s, x, g, best);
    for (std::int64_t ch = 0; ch < g.channels; ++ch)
      dx[scan_offset(s, g, best.pos[static_cast<std::size_t>(ch)]) + ch] += dy[ch];
  });
}

void avg_pool_grad_cpu(KernelContext& ctx) {
  scatter_windows(
      ctx, [](const Span2D& s, const float*, const float* dy, float* dx, const WindowGeometry& g, ArgmaxScratch&) {
        const float inv = 1.0f / static_cast<float>(s.count());
        for (std::int64_t h = s.h0; h < s.h1; ++h)
          for (std::int64_t w = s.w0; w < s.w1; ++w) {
            float* target = dx + (h * g.w.in + w) * g.channels;
            for (std::int64_t ch = 0; ch < g.channels; ++ch) target[ch] += dy[ch] * inv;
          }
      });
}

}  // namespace

TCTL_REGISTER_KERNELS("cpu", {"MaxPool2D", max_pool_cpu}, {"MaxPool2DGrad", max_pool_grad_cpu},
                      {"AvgPool2D", avg_pool_cpu}, {"AvgPool2DGrad", avg_pool_grad_cpu});

}  // namespace tctl::cpu
