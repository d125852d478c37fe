// CPU kernels of the per-example losses and their gradients: fused softmax cross-entropy (sparse int labels
// or one-hot), binary cross-entropy on probabilities, mean squared error, mean absolute error and Huber
// (definitions in core/ops/losses.cpp). Each returns a [N] vector.
#include <cmath>

#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {
namespace {

std::int32_t checked_label(const KernelContext& ctx, std::int64_t row, std::int64_t classes) {
  std::int32_t label = ctx.input(1).data<std::int32_t>()[row];
  if (label < 0 || label >= classes)
    throw RuntimeError(ctx.node().name + ": label " + std::to_string(label) + " in row " + std::to_string(row) +
                       " is outside [0, " + std::to_string(classes) + ")");
  return label;
}

// Rows are independent, so the split over rows cannot change any value.
template <class RowFn>
void for_each_row(KernelContext& ctx, std::int64_t rows, std::int64_t width, RowFn fn) {
  ctx.parallel_for(rows, std::max<std::int64_t>(1, kElementwiseGrain / width),
                   [&](std::int64_t begin, std::int64_t end) {
                     std::vector<float> p(static_cast<std::size_t>(width));
                     for (std::int64_t r = begin; r < end; ++r) fn(r, p.data());
                   });
}

void sparse_xent_cpu(KernelContext& ctx) {
  const Tensor& logits = ctx.input(0);
  const std::int64_t n = logits.shape()[0], c = logits.shape()[1];
  float* loss = ctx.output().mutable_data<float>();
  for_each_row(ctx, n, c, [&](std::int64_t r, float* p) {
    const float* x = logits.data<float>() + r * c;
    loss[r] = softmax_row(x, c, p) - x[checked_label(ctx, r, c)];
  });
}

// Inputs: logits, labels, dy [N]. dlogits = (softmax - onehot) * dy.
void sparse_xent_grad_cpu(KernelContext& ctx) {
  const Tensor& logits = ctx.input(0);
  const float* dy = ctx.input(2).data<float>();
  const std::int64_t n = logits.shape()[0], c = logits.shape()[1];
  float* dx = ctx.output().mutable_data<float>();
  for_each_row(ctx, n, c, [&](std::int64_t r, float*) {
    softmax_row(logits.data<float>() + r * c, c, dx + r * c);
    dx[r * c + checked_label(ctx, r, c)] -= 1.0f;
    for (std::int64_t j = 0; j < c; ++j) dx[r * c + j] *= dy[r];
  });
}

void dense_xent_cpu(KernelContext& ctx) {
  const Tensor& logits = ctx.input(0);
  const float* t = ctx.input(1).data<float>();
  const std::int64_t n = logits.shape()[0], c = logits.shape()[1];
  float* loss = ctx.output().mutable_data<float>();
  for_each_row(ctx, n, c, [&](std::int64_t r, float* p) {
    const float* x = logits.data<float>() + r * c;
    const float lse = softmax_row(x, c, p);
    float l = 0.0f;
    for (std::int64_t j = 0; j < c; ++j) l += t[r * c + j] * (lse - x[j]);
    loss[r] = l;
  });
}

// dlogits = (softmax * sum(t) - t) * dy; sum(t) is 1 for a proper distribution.
void dense_xent_grad_cpu(KernelContext& ctx) {
  const Tensor& logits = ctx.input(0);
  const float* t = ctx.input(1).data<float>();
  const float* dy = ctx.input(2).data<float>();
  const std::int64_t n = logits.shape()[0], c = logits.shape()[1];
  float* dx = ctx.output().mutable_data<float>();
  for_each_row(ctx, n, c, [&](std::int64_t r, float*) {
    softmax_row(logits.data<float>() + r * c, c, dx + r * c);
    float total = 0.0f;
    for (std::int64_t j = 0; j < c; ++j) total += t[r * c + j];
    for (std::int64_t j = 0; j < c; ++j) dx[r * c + j] = (dx[r * c + j] * total - t[r * c + j]) * dy[r];
  });
}

// The elementwise losses: loss[r] = mean_j f(p[r, j], t[r, j]), and dp = f'(p, t) / F * dy[r].
template <class F>
void elementwise_loss(KernelContext& ctx, F f) {
  const Tensor& pred = ctx.input(0);
  const float* p = pred.data<float>();
  const float* t = ctx.input(1).data<float>();
  const std::int64_t n = pred.shape()[0], w = pred.num_elements() / std::max<std::int64_t>(n, 1);
  float* loss = ctx.output().mutable_data<float>();
  for_each_row(ctx, n, w, [&](std::int64_t r, float*) {
    float s = 0.0f;
    for (std::int64_t j = 0; j < w; ++j) s += f(p[r * w + j], t[r * w + j]);
    loss[r] = s / static_cast<float>(w);
  });
}

template <class F>
void elementwise_loss_grad(KernelContext& ctx, F df) {
  const Tensor& pred = ctx.input(0);
  const float* p = pred.data<float>();
  const float* t = ctx.input(1).data<float>();
  const float* dy = ctx.input(2).data<float>();
  const std::int64_t n = pred.shape()[0], w = pred.num_elements() / std::max<std::int64_t>(n, 1);
  float* dx = ctx.output().mutable_data<float>();
  const float inv = 1.0f / static_cast<float>(w);
  for_each_row(ctx, n, w, [&](std::int64_t r, float*) {
    for (std::int64_t j = 0; j < w; ++j) dx[r * w + j] = df(p[r * w + j], t[r * w + j]) * inv * dy[r];
  });
}

float sign(float x) { return static_cast<float>((x > 0.0f) - (x < 0.0f)); }

void mse_cpu(KernelContext& ctx) {
  elementwise_loss(ctx, [](float p, float t) { return (p - t) * (p - t); });
}
void mse_grad_cpu(KernelContext& ctx) {
  elementwise_loss_grad(ctx, [](float p, float t) { return 2.0f * (p - t); });
}

void mae_cpu(KernelContext& ctx) {
  elementwise_loss(ctx, [](float p, float t) { return std::abs(p - t); });
}
void mae_grad_cpu(KernelContext& ctx) {
  elementwise_loss_grad(ctx, [](float p, float t) { return sign(p - t); });
}

// Keras' Huber: 0.5 d^2 where |d| <= delta, else delta (|d| - 0.5 delta).
void huber_cpu(KernelContext& ctx) {
  const float delta = static_cast<float>(ctx.attrs().f("delta"));
  elementwise_loss(ctx, [delta](float p, float t) {
    const float d = std::abs(p - t);
    return d <= delta ? 0.5f * d * d : delta * (d - 0.5f * delta);
  });
}
void huber_grad_cpu(KernelContext& ctx) {
  const float delta = static_cast<float>(ctx.attrs().f("delta"));
  elementwise_loss_grad(ctx, [delta](float p, float t) {
    const float d = p - t;
    return std::abs(d) <= delta ? d : delta * sign(d);
  });
}

// Keras' binary cross-entropy on probabilities: p is clipped to [eps, 1 - eps] so log never sees 0, and
// the clip's gradient is zero outside that range, as in Keras.
void binary_xent_cpu(KernelContext& ctx) {
  const float eps = static_cast<float>(ctx.attrs().f("epsilon"));
  elementwise_loss(ctx, [eps](float p, float t) {
    const float q = std::clamp(p, eps, 1.0f - eps);
    return -(t * std::log(q) + (1.0f - t) * std::log(1.0f - q));
  });
}
void binary_xent_grad_cpu(KernelContext& ctx) {
  const float eps = static_cast<float>(ctx.attrs().f("epsilon"));
  elementwise_loss_grad(ctx, [eps](float p, float t) {
    if (p < eps || p > 1.0f - eps) return 0.0f;
    return (p - t) / (p * (1.0f - p));
  });
}

// Each row's class weight (core/ops/losses.cpp): weights[label], the one-hot row's dot product with the
// weights, or w0 (1 - y) + w1 y for a binary target; a label outside the weights weighs 0.
void class_weight_cpu(KernelContext& ctx) {
  const Tensor& t = ctx.input(0);
  const float* w = ctx.input(1).data<float>();
  const std::int64_t classes = ctx.input(1).num_elements();
  const std::int64_t n = t.shape()[0];
  float* out = ctx.output().mutable_data<float>();
  if (t.dtype() == DType::kI32) {
    const std::int32_t* label = t.data<std::int32_t>();
    for (std::int64_t r = 0; r < n; ++r) out[r] = label[r] >= 0 && label[r] < classes ? w[label[r]] : 0.0f;
    return;
  }
  const float* y = t.data<float>();
  const std::int64_t width = n == 0 ? 0 : t.num_elements() / n;
  for (std::int64_t r = 0; r < n; ++r) {
    if (width == classes) {
      float sum = 0.0f;
      for (std::int64_t c = 0; c < classes; ++c) sum += y[r * width + c] * w[c];
      out[r] = sum;
    } else {
      out[r] = w[0] * (1.0f - y[r]) + w[1] * y[r];
    }
  }
}

}  // namespace

TCTL_REGISTER_KERNELS("cpu", {"ClassWeight", class_weight_cpu}, {"SparseSoftmaxXent", sparse_xent_cpu},
                      {"SparseSoftmaxXentGrad", sparse_xent_grad_cpu}, {"SoftmaxXent", dense_xent_cpu},
                      {"SoftmaxXentGrad", dense_xent_grad_cpu}, {"Mse", mse_cpu}, {"MseGrad", mse_grad_cpu},
                      {"Mae", mae_cpu}, {"MaeGrad", mae_grad_cpu}, {"Huber", huber_cpu}, {"HuberGrad", huber_grad_cpu},
                      {"BinaryXent", binary_xent_cpu}, {"BinaryXentGrad", binary_xent_grad_cpu});

}  // namespace tctl::cpu
