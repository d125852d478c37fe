// Per-example losses and their gradients: fused softmax cross-entropy (sparse int labels or one-hot), binary
// cross-entropy on probabilities, mean squared error, mean absolute error and Huber. Each returns a [N]
// vector; the mean over the batch is a Mean op after it.
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

TensorSpec sparse_xent_infer(const InferContext& c) {
  c.expect_rank(0, 2);
  c.expect_rank(1, 1);
  c.expect_dtype(1, DType::kI32);
  if (!Shape{c.shape(0)[0]}.compatible(c.shape(1)))
    c.fail("logits " + c.shape(0).to_string() + " and labels " + c.shape(1).to_string() + " differ in batch size");
  return {DType::kF32, Shape{c.shape(0)[0]}};
}

TensorSpec dense_xent_infer(const InferContext& c) {
  c.expect_rank(0, 2);
  if (!c.shape(1).compatible(c.shape(0)))
    c.fail("logits " + c.shape(0).to_string() + " and targets " + c.shape(1).to_string() + " differ");
  return {DType::kF32, Shape{c.shape(0)[0]}};
}

// Rows are independent, so the split over rows cannot change any value.
template <class RowFn>
void for_each_row(KernelContext& ctx, std::int64_t rows, std::int64_t width, RowFn fn) {
  ctx.parallel_for(rows, std::max<std::int64_t>(1, kElementwiseGrain / width), [&](std::int64_t begin, std::int64_t end) {
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

TensorSpec mse_infer(const InferContext& c) {
  if (c.shape(0).rank() < 1) c.fail("predictions need a batch dimension");
  if (!c.shape(1).compatible(c.shape(0)))
    c.fail("predictions " + c.shape(0).to_string() + " and targets " + c.shape(1).to_string() + " differ");
  return {DType::kF32, Shape{c.shape(0)[0]}};
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

TensorSpec grad_like_logits(const InferContext& c) { return c.input(0); }

}  // namespace

TCTL_REGISTER_OP({.name = "SparseSoftmaxXent",
                  .num_inputs = 2,
                  .infer = sparse_xent_infer,
                  .grad = [](GradBuilder& g) {
                    return std::vector<Output>{g.op("SparseSoftmaxXentGrad", {g.x(0), g.x(1), g.dy()}), Output{}};
                  },
                  .cpu = sparse_xent_cpu});
TCTL_REGISTER_OP({.name = "SparseSoftmaxXentGrad", .num_inputs = 3, .infer = grad_like_logits, .cpu = sparse_xent_grad_cpu});
TCTL_REGISTER_OP({.name = "SoftmaxXent",
                  .num_inputs = 2,
                  .infer = dense_xent_infer,
                  .grad = [](GradBuilder& g) {
                    return std::vector<Output>{g.op("SoftmaxXentGrad", {g.x(0), g.x(1), g.dy()}), Output{}};
                  },
                  .cpu = dense_xent_cpu});
TCTL_REGISTER_OP({.name = "SoftmaxXentGrad", .num_inputs = 3, .infer = grad_like_logits, .cpu = dense_xent_grad_cpu});
TCTL_REGISTER_OP({.name = "Mse",
                  .num_inputs = 2,
                  .infer = mse_infer,
                  .grad = [](GradBuilder& g) {
                    return std::vector<Output>{g.op("MseGrad", {g.x(0), g.x(1), g.dy()}), Output{}};
                  },
                  .cpu = mse_cpu});
TCTL_REGISTER_OP({.name = "MseGrad", .num_inputs = 3, .infer = grad_like_logits, .cpu = mse_grad_cpu});
TCTL_REGISTER_OP({.name = "Mae",
                  .num_inputs = 2,
                  .infer = mse_infer,
                  .grad = [](GradBuilder& g) {
                    return std::vector<Output>{g.op("MaeGrad", {g.x(0), g.x(1), g.dy()}), Output{}};
                  },
                  .cpu = mae_cpu});
TCTL_REGISTER_OP({.name = "MaeGrad", .num_inputs = 3, .infer = grad_like_logits, .cpu = mae_grad_cpu});
TCTL_REGISTER_OP({.name = "Huber",
                  .num_inputs = 2,
                  .infer = mse_infer,
                  .grad = [](GradBuilder& g) {
                    return std::vector<Output>{g.op("HuberGrad", {g.x(0), g.x(1), g.dy()}, g.attrs()), Output{}};
                  },
                  .cpu = huber_cpu});
TCTL_REGISTER_OP({.name = "HuberGrad", .num_inputs = 3, .infer = grad_like_logits, .cpu = huber_grad_cpu});
TCTL_REGISTER_OP({.name = "BinaryXent",
                  .num_inputs = 2,
                  .infer = mse_infer,
                  .grad = [](GradBuilder& g) {
                    return std::vector<Output>{g.op("BinaryXentGrad", {g.x(0), g.x(1), g.dy()}, g.attrs()), Output{}};
                  },
                  .cpu = binary_xent_cpu});
TCTL_REGISTER_OP({.name = "BinaryXentGrad", .num_inputs = 3, .infer = grad_like_logits, .cpu = binary_xent_grad_cpu});

}  // namespace tctl::cpu
