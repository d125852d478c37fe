// CUDA kernels of the per-example losses and their gradients (definitions in core/ops/losses.cpp; CPU:
// kernels/cpu/losses.cpp). Each loss is a [N] vector; its mean over the batch is a Mean op after it.
// - Softmax cross-entropy (sparse labels or dense targets): one warp per row (device_math.cuh), so the row
//   sums add in a fixed tree, not left to right as on the CPU, and expf/logf differ from glibc's by a few ulp.
// - Mse, Mae, Huber, BinaryXent: one thread per row adds the row's terms left to right as the CPU does, so
//   Mse, Mae and Huber and every elementwise gradient are bit-identical to the CPU's (BinaryXent's logf not).
// An out-of-range label: a kernel cannot throw, so it notes the first such row in a scratch word, whose copy
// reaches the host in stream order (CudaDevice::enqueue_report) and throws the CPU's RuntimeError there; the
// device's next synchronize rethrows it. The row's outputs are NaN, and nothing is read at the label.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "core/errors.h"
#include "core/op_registry.h"
#include "kernels/cuda/device_math.cuh"

namespace tctl::cuda {
namespace {

// Whether row r's label is one of the c classes; when not, lane 0 notes it in *first_bad as r << 32 | label,
// whose smallest value is the first bad row (the minimum is the same in whatever order the rows come; a row
// past 2^32 - 1 would be reported as that).
__device__ bool label_fits(std::int32_t label, std::int64_t c, std::int64_t r, unsigned long long* first_bad) {
  if (label >= 0 && label < c) return true;
  const unsigned long long row = r < 0xffffffffLL ? r : 0xffffffffULL;
  if (lane_id() == 0) atomicMin(first_bad, row << 32 | static_cast<std::uint32_t>(label));
  return false;
}

// loss[r] = logsumexp(x_r) - x_r[label_r].
__global__ void sparse_xent_rows(const float* logits, const std::int32_t* labels, float* loss,
                                 unsigned long long* first_bad, std::int64_t n, std::int64_t c) {
  TCTL_WARP_ROW_LOOP(r, n) {
    const float* x = logits + r * c;
    const SoftmaxStats s = warp_softmax_stats(x, c);
    const std::int32_t label = labels[r];
    const bool fits = label_fits(label, c, r, first_bad);
    if (lane_id() == 0) loss[r] = fits ? logf(s.sum) + s.max - x[label] : NAN;
  }
}

// dlogits = (softmax - onehot) * dy, rounded step by step as the CPU's.
__global__ void sparse_xent_grad_rows(const float* logits, const std::int32_t* labels, const float* dy, float* dx,
                                      unsigned long long* first_bad, std::int64_t n, std::int64_t c) {
  TCTL_WARP_ROW_LOOP(r, n) {
    const float* x = logits + r * c;
    const SoftmaxStats s = warp_softmax_stats(x, c);
    const float inv = 1.0f / s.sum;
    const std::int32_t label = labels[r];
    const bool fits = label_fits(label, c, r, first_bad);
    for (std::int64_t j = lane_id(); j < c; j += kWarp) {
      float p = mul(expf(x[j] - s.max), inv);
      if (j == label) p -= 1.0f;
      dx[r * c + j] = fits ? p * dy[r] : NAN;
    }
  }
}

// loss[r] = sum_j t[r, j] (logsumexp(x_r) - x[r, j]).
__global__ void dense_xent_rows(const float* logits, const float* t, float* loss, std::int64_t n, std::int64_t c) {
  TCTL_WARP_ROW_LOOP(r, n) {
    const float* x = logits + r * c;
    const SoftmaxStats s = warp_softmax_stats(x, c);
    const float lse = logf(s.sum) + s.max;
    float l = 0.0f;
    for (std::int64_t j = lane_id(); j < c; j += kWarp) l += mul(t[r * c + j], lse - x[j]);
    l = warp_sum(l);
    if (lane_id() == 0) loss[r] = l;
  }
}

// dlogits = (softmax * sum(t) - t) * dy; sum(t) is 1 for a proper distribution.
__global__ void dense_xent_grad_rows(const float* logits, const float* t, const float* dy, float* dx, std::int64_t n,
                                     std::int64_t c) {
  TCTL_WARP_ROW_LOOP(r, n) {
    const float* x = logits + r * c;
    const SoftmaxStats s = warp_softmax_stats(x, c);
    const float inv = 1.0f / s.sum;
    float total = 0.0f;
    for (std::int64_t j = lane_id(); j < c; j += kWarp) total += t[r * c + j];
    total = warp_sum(total);
    for (std::int64_t j = lane_id(); j < c; j += kWarp)
      dx[r * c + j] = (mul(expf(x[j] - s.max) * inv, total) - t[r * c + j]) * dy[r];
  }
}

// Mse, Mae, Huber and BinaryXent as f.value(p, t) and its derivative f.grad(p, t) in p. A product that
// ends in the row's sum goes through mul(), so nvcc makes no FMA the CPU does not make.
struct Mse {
  __device__ float value(float p, float t) const { return mul(p - t, p - t); }
  __device__ float grad(float p, float t) const { return 2.0f * (p - t); }
};
__device__ float sign(float x) { return static_cast<float>((x > 0.0f) - (x < 0.0f)); }
struct Mae {
  __device__ float value(float p, float t) const { return fabsf(p - t); }
  __device__ float grad(float p, float t) const { return sign(p - t); }
};
struct Huber {  // Keras': 0.5 d^2 where |d| <= delta, else delta (|d| - 0.5 delta)
  float delta;
  __device__ float value(float p, float t) const {
    const float d = fabsf(p - t);
    return d <= delta ? mul(mul(0.5f, d), d) : mul(delta, d - mul(0.5f, delta));
  }
  __device__ float grad(float p, float t) const {
    const float d = p - t;
    return fabsf(d) <= delta ? d : delta * sign(d);
  }
};
struct BinaryXent {  // on probabilities clipped to [eps, 1 - eps]; the clip's gradient is 0 outside, as in Keras
  float eps;
  __device__ float value(float p, float t) const {
    const float q = p < eps ? eps : (1.0f - eps < p ? 1.0f - eps : p);  // std::clamp's order: a NaN stays
    return -(mul(t, logf(q)) + mul(1.0f - t, logf(1.0f - q)));
  }
  __device__ float grad(float p, float t) const {
    if (p < eps || p > 1.0f - eps) return 0.0f;
    return (p - t) / (p * (1.0f - p));
  }
};

// loss[r] = mean_j f(p[r, j], t[r, j]) over a row of w, added left to right by one thread.
template <class F>
__global__ void elementwise_loss_rows(const float* p, const float* t, float* loss, std::int64_t n, std::int64_t w,
                                      F f) {
  TCTL_GRID_STRIDE_LOOP(r, n) {
    float s = 0.0f;
    for (std::int64_t j = 0; j < w; ++j) s += f.value(p[r * w + j], t[r * w + j]);
    loss[r] = s / static_cast<float>(w);
  }
}

// dp = f'(p, t) * (1 / w) * dy[row].
template <class F>
__global__ void elementwise_loss_grad_elements(const float* p, const float* t, const float* dy, float* dx,
                                               std::int64_t total, std::int64_t w, float inv, F f) {
  TCTL_GRID_STRIDE_LOOP(i, total) dx[i] = f.grad(p[i], t[i]) * inv * dy[i / w];
}

// Predictions [N, ...] as N rows of w.
std::int64_t row_width(const Tensor& pred) { return pred.num_elements() / std::max<std::int64_t>(pred.shape()[0], 1); }

template <class F>
void elementwise_loss(KernelContext& ctx, F f) {
  const Tensor& pred = ctx.input(0);
  const std::int64_t n = pred.shape()[0];
  launch_elements(ctx, n, elementwise_loss_rows<F>, in<float>(ctx, 0), in<float>(ctx, 1), out<float>(ctx), n,
                  row_width(pred), f);
}

// Inputs (predictions, targets, dy).
template <class F>
void elementwise_loss_grad(KernelContext& ctx, F f) {
  const Tensor& pred = ctx.input(0);
  const std::int64_t total = pred.num_elements(), w = row_width(pred);
  launch_elements(ctx, total, elementwise_loss_grad_elements<F>, in<float>(ctx, 0), in<float>(ctx, 1),
                  in<float>(ctx, 2), out<float>(ctx), total, w, 1.0f / static_cast<float>(w), f);
}

// Logits [N, C]: N rows of C. The gradients take (logits, labels or targets, dy).
std::int64_t batch(const KernelContext& ctx) { return ctx.input(0).shape()[0]; }
std::int64_t classes(const KernelContext& ctx) { return ctx.input(0).shape()[1]; }

// Runs kernel(args..., first_bad, n, c) on the rows of the logits, then has the host throw the CPU's error
// for the first bad label the kernel noted, if any.
template <class Kernel, class... Args>
void launch_checking_labels(KernelContext& ctx, Kernel kernel, Args... args) {
  const std::int64_t n = batch(ctx), c = classes(ctx);
  if (n == 0) {
    check_launch(ctx);
    return;
  }
  const Tensor word = Tensor::empty(DType::kI64, Shape{1}, &ctx.device());
  auto* first_bad = static_cast<unsigned long long*>(word.raw_mutable_data());
  cudaMemsetAsync(first_bad, 0xff, sizeof *first_bad, stream_of(ctx));  // none yet; check_launch reports a failure
  launch_rows(ctx, n, kernel, args..., first_bad, n, c);
  device_of(ctx).enqueue_report(first_bad, sizeof *first_bad, [node = ctx.node().name, c](const void* host) {
    const unsigned long long key = *static_cast<const unsigned long long*>(host);
    if (key == ~0ULL) return;
    throw RuntimeError(node + ": label " + std::to_string(static_cast<std::int32_t>(key & 0xffffffffULL)) + " in row " +
                       std::to_string(key >> 32) + " is outside [0, " + std::to_string(c) + ")");
  });
}

void sparse_xent_cuda(KernelContext& ctx) {
  launch_checking_labels(ctx, sparse_xent_rows, in<float>(ctx, 0), in<std::int32_t>(ctx, 1), out<float>(ctx));
}
void sparse_xent_grad_cuda(KernelContext& ctx) {
  launch_checking_labels(ctx, sparse_xent_grad_rows, in<float>(ctx, 0), in<std::int32_t>(ctx, 1), in<float>(ctx, 2),
                         out<float>(ctx));
}
void dense_xent_cuda(KernelContext& ctx) {
  launch_rows(ctx, batch(ctx), dense_xent_rows, in<float>(ctx, 0), in<float>(ctx, 1), out<float>(ctx), batch(ctx),
              classes(ctx));
}
void dense_xent_grad_cuda(KernelContext& ctx) {
  launch_rows(ctx, batch(ctx), dense_xent_grad_rows, in<float>(ctx, 0), in<float>(ctx, 1), in<float>(ctx, 2),
              out<float>(ctx), batch(ctx), classes(ctx));
}

float attr(const KernelContext& ctx, const char* name) { return static_cast<float>(ctx.attrs().f(name)); }

void mse_cuda(KernelContext& ctx) { elementwise_loss(ctx, Mse{}); }
void mse_grad_cuda(KernelContext& ctx) { elementwise_loss_grad(ctx, Mse{}); }
void mae_cuda(KernelContext& ctx) { elementwise_loss(ctx, Mae{}); }
void mae_grad_cuda(KernelContext& ctx) { elementwise_loss_grad(ctx, Mae{}); }
void huber_cuda(KernelContext& ctx) { elementwise_loss(ctx, Huber{attr(ctx, "delta")}); }
void huber_grad_cuda(KernelContext& ctx) { elementwise_loss_grad(ctx, Huber{attr(ctx, "delta")}); }
void binary_xent_cuda(KernelContext& ctx) { elementwise_loss(ctx, BinaryXent{attr(ctx, "epsilon")}); }
void binary_xent_grad_cuda(KernelContext& ctx) { elementwise_loss_grad(ctx, BinaryXent{attr(ctx, "epsilon")}); }

// Each row's class weight, one thread a row, as the CPU computes it (kernels/cpu/losses.cpp).
__global__ void class_weight_rows(const std::int32_t* labels, const float* y, std::int64_t width, const float* w,
                                  std::int64_t classes, float* out, std::int64_t n) {
  for (std::int64_t r = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; r < n;
       r += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    if (labels != nullptr) {
      out[r] = labels[r] >= 0 && labels[r] < classes ? w[labels[r]] : 0.0f;
    } else if (width == classes) {
      float sum = 0.0f;
      for (std::int64_t c = 0; c < classes; ++c) sum = __fadd_rn(sum, __fmul_rn(y[r * width + c], w[c]));
      out[r] = sum;
    } else {
      out[r] = __fadd_rn(__fmul_rn(w[0], __fsub_rn(1.0f, y[r])), __fmul_rn(w[1], y[r]));
    }
  }
}

void class_weight_cuda(KernelContext& ctx) {
  const Tensor& t = ctx.input(0);
  const std::int64_t n = t.shape()[0];
  const bool sparse = t.dtype() == DType::kI32;
  launch_elements(ctx, n, class_weight_rows, sparse ? in<std::int32_t>(ctx, 0) : nullptr,
                  sparse ? nullptr : in<float>(ctx, 0), n > 0 ? t.num_elements() / n : 0, in<float>(ctx, 1),
                  ctx.input(1).num_elements(), out<float>(ctx), n);
}

}  // namespace

TCTL_REGISTER_KERNELS("cuda", {"ClassWeight", class_weight_cuda}, {"SparseSoftmaxXent", sparse_xent_cuda},
                      {"SparseSoftmaxXentGrad", sparse_xent_grad_cuda}, {"SoftmaxXent", dense_xent_cuda},
                      {"SoftmaxXentGrad", dense_xent_grad_cuda}, {"Mse", mse_cuda}, {"MseGrad", mse_grad_cuda},
                      {"Mae", mae_cuda}, {"MaeGrad", mae_grad_cuda}, {"Huber", huber_cuda},
                      {"HuberGrad", huber_grad_cuda}, {"BinaryXent", binary_xent_cuda},
                      {"BinaryXentGrad", binary_xent_grad_cuda});

}  // namespace tctl::cuda
