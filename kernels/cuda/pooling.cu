// CUDA kernels of MaxPool2D and AvgPool2D on NHWC float32 inputs and of their gradients (definitions in
// core/ops/pooling.cpp, CPU kernels in kernels/cpu/pooling.cpp), with the CPU's bits: the same comparisons
// (the max keeps the earlier value unless a later one is greater, so NaNs are passed over; the gradient
// goes to the first maximum in scan order, a NaN first in the window included), averages over the input
// elements a window covers (padding never counts), and the gradients added in the CPU's order. The CPU
// scatters each window's gradient; here each input element gathers from the windows covering it, in
// output order, with no atomics. MaxPool2DGrad first writes each window's argmax to a scratch tensor.
#include <math_constants.h>

#include "core/op_registry.h"
#include "kernels/cuda/conv_util.cuh"

namespace tctl::cuda {
namespace {

// The input rows [h0, h1) and columns [w0, w1) window (oh, ow) covers, clipped to the input.
struct Span2D {
  std::int64_t h0, h1, w0, w1;
};

__device__ Span2D window_span(const WindowGeometry& g, std::int64_t oh, std::int64_t ow) {
  const std::int64_t h = oh * g.h.stride - g.h.pad_before, w = ow * g.w.stride - g.w.pad_before;
  return {h > 0 ? h : 0, h + g.h.window < g.h.in ? h + g.h.window : g.h.in, w > 0 ? w : 0,
          w + g.w.window < g.w.in ? w + g.w.window : g.w.in};
}

// 1 / the number of input elements the clipped window covers: what its average multiplies the sum by.
__device__ float inverse_count(const Span2D& s) { return 1.0f / static_cast<float>((s.h1 - s.h0) * (s.w1 - s.w0)); }

// Output element o = ((n, oh, ow), ch): its image n, channel ch and clipped window.
struct PoolOutput {
  std::int64_t n, ch;
  Span2D s;
};

__device__ PoolOutput pool_output(const WindowGeometry& g, std::int64_t o) {
  const std::int64_t pixel = o / g.channels, p = pixel % (g.h.out * g.w.out);
  return {pixel / (g.h.out * g.w.out), o % g.channels, window_span(g, p / g.w.out, p % g.w.out)};
}

__device__ float input_at(const float* x, const WindowGeometry& g, std::int64_t n, std::int64_t h, std::int64_t w,
                          std::int64_t ch) {
  return x[((n * g.h.in + h) * g.w.in + w) * g.channels + ch];
}

// As std::max(y, v) on the CPU: v replaces y only when greater.
struct MaxPool {
  const float* x;
  float* y;
  WindowGeometry g;
  __device__ void operator()(std::int64_t o) const {
    const PoolOutput at = pool_output(g, o);
    float m = -CUDART_INF_F;
    for (std::int64_t h = at.s.h0; h < at.s.h1; ++h)
      for (std::int64_t w = at.s.w0; w < at.s.w1; ++w) {
        const float v = input_at(x, g, at.n, h, w, at.ch);
        m = m < v ? v : m;
      }
    y[o] = m;
  }
};

// The sum in scan order, times 1 / count, as the CPU computes it.
struct AvgPool {
  const float* x;
  float* y;
  WindowGeometry g;
  __device__ void operator()(std::int64_t o) const {
    const PoolOutput at = pool_output(g, o);
    float sum = 0.0f;
    for (std::int64_t h = at.s.h0; h < at.s.h1; ++h)
      for (std::int64_t w = at.s.w0; w < at.s.w1; ++w) sum += input_at(x, g, at.n, h, w, at.ch);
    y[o] = sum * inverse_count(at.s);
  }
};

// argmax[o] = h * W + w of window o's first maximum in scan order: a strict > from the window's first
// element, as kernels/cpu/pooling.cpp's window_argmax.
struct WindowArgmax {
  const float* x;
  std::int64_t* argmax;
  WindowGeometry g;
  __device__ void operator()(std::int64_t o) const {
    const PoolOutput at = pool_output(g, o);
    std::int64_t best = at.s.h0 * g.w.in + at.s.w0;
    float value = input_at(x, g, at.n, at.s.h0, at.s.w0, at.ch);
    for (std::int64_t h = at.s.h0; h < at.s.h1; ++h)
      for (std::int64_t w = at.s.w0; w < at.s.w1; ++w) {
        const float v = input_at(x, g, at.n, h, w, at.ch);
        if (v > value) {
          value = v;
          best = h * g.w.in + w;
        }
      }
    argmax[o] = best;
  }
};

// Input element e = (n, h, w, ch) and the output windows covering it.
struct Covered {
  std::int64_t n, h, w, ch;
  OutRange rows, columns;
};

// The index of window (oh, ow)'s output in e's image and channel.
__device__ std::int64_t output_index(const WindowGeometry& g, const Covered& at, std::int64_t oh, std::int64_t ow) {
  return ((at.n * g.h.out + oh) * g.w.out + ow) * g.channels + at.ch;
}

__device__ Covered covered(const WindowGeometry& g, std::int64_t e) {
  const std::int64_t ch = e % g.channels, w = e / g.channels % g.w.in, h = e / (g.channels * g.w.in) % g.h.in;
  return {e / (g.channels * g.w.in * g.h.in), h, w, ch, covering(g.h, h), covering(g.w, w)};
}

// dx[e]: dy of each window covering e whose argmax e is, added from zero in output order, as the CPU adds
// them (and as its tiled path's 0 + dy, where one window covers e).
struct MaxPoolGrad {
  const float* dy;
  const std::int64_t* argmax;
  float* dx;
  WindowGeometry g;
  __device__ void operator()(std::int64_t e) const {
    const Covered at = covered(g, e);
    const std::int64_t self = at.h * g.w.in + at.w;
    float sum = 0.0f;
    for (std::int64_t oh = at.rows.first; oh < at.rows.last; ++oh)
      for (std::int64_t ow = at.columns.first; ow < at.columns.last; ++ow) {
        const std::int64_t o = output_index(g, at, oh, ow);
        if (argmax[o] == self) sum += dy[o];
      }
    dx[e] = sum;
  }
};

// dx[e]: dy / count of each window covering e, each product rounded before it is added (no FMA), added
// from zero in output order, as the CPU adds them.
struct AvgPoolGrad {
  const float* dy;
  float* dx;
  WindowGeometry g;
  __device__ void operator()(std::int64_t e) const {
    const Covered at = covered(g, e);
    float sum = 0.0f;
    for (std::int64_t oh = at.rows.first; oh < at.rows.last; ++oh)
      for (std::int64_t ow = at.columns.first; ow < at.columns.last; ++ow) {
        const float inv = inverse_count(window_span(g, oh, ow));
        sum = __fadd_rn(sum, __fmul_rn(dy[output_index(g, at, oh, ow)], inv));
      }
    dx[e] = sum;
  }
};

// The geometry of a pooling node whose input (x) is input i.
WindowGeometry pool_geometry(const KernelContext& ctx, int i) {
  const auto& window = ctx.attrs().ints("window");
  return window_geometry(ctx.attrs(), ctx.input(i).shape(), window[0], window[1]);
}

void max_pool_cuda(KernelContext& ctx) {
  launch_each(ctx, ctx.output().num_elements(), MaxPool{in<float>(ctx, 0), out<float>(ctx), pool_geometry(ctx, 0)});
}

void avg_pool_cuda(KernelContext& ctx) {
  launch_each(ctx, ctx.output().num_elements(), AvgPool{in<float>(ctx, 0), out<float>(ctx), pool_geometry(ctx, 0)});
}

// Inputs (dy, x).
void max_pool_grad_cuda(KernelContext& ctx) {
  const WindowGeometry g = pool_geometry(ctx, 1);
  const std::int64_t outputs = ctx.input(0).num_elements();
  const Tensor argmax = Tensor::empty(DType::kI64, Shape{outputs}, &ctx.device());
  auto* pa = static_cast<std::int64_t*>(argmax.raw_mutable_data());
  launch_each(ctx, outputs, WindowArgmax{in<float>(ctx, 1), pa, g});
  launch_each(ctx, ctx.output().num_elements(), MaxPoolGrad{in<float>(ctx, 0), pa, out<float>(ctx), g});
}

// Inputs (dy, x); x gives only the shape.
void avg_pool_grad_cuda(KernelContext& ctx) {
  launch_each(ctx, ctx.output().num_elements(), AvgPoolGrad{in<float>(ctx, 0), out<float>(ctx), pool_geometry(ctx, 1)});
}

}  // namespace

TCTL_REGISTER_KERNELS("cuda", {"MaxPool2D", max_pool_cuda}, {"MaxPool2DGrad", max_pool_grad_cuda},
                      {"AvgPool2D", avg_pool_cuda}, {"AvgPool2DGrad", avg_pool_grad_cuda});

}  // namespace tctl::cuda
