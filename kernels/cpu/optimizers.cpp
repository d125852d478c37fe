// Optimizer updates. Each is one fused pass per variable that writes the variable (and its slots) in
// place under the variable's lock. Inputs: the gradient, and for Adam the number of steps completed before
// this one (a float scalar read of the optimizer's step counter). The output is unused.
#include <cmath>

#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {
namespace {

TensorSpec update_infer(const InferContext& c) { return {DType::kF32, Shape{}}; }

// Elements per intra-op block of an update pass.
constexpr std::int64_t kUpdateGrain = 32768;

// Every update goes through Variable::Update::apply, so it honours the variable's locking mode: under
// its lock, by compare-and-swap, or unsynchronized. The slots share their variable's mode.

// w -= lr * g
void apply_sgd_cpu(KernelContext& ctx) {
  const float lr = static_cast<float>(ctx.attrs().f("learning_rate"));
  const float* g = ctx.input(0).data<float>();
  Variable::Update w(ctx.var(0));
  // race-check --widen: yields between each element's read and write, in the unsynchronized modes only.
  w.set_widen(static_cast<int>(ctx.attrs().i_or("widen", 0)));
  ctx.parallel_for(w.size(), kUpdateGrain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) w.apply(i, [&](float x) { return x - lr * g[i]; });
  });
}

// Keras' formulation: v = momentum * v - lr * g; w += v (nesterov: w += momentum * v - lr * g).
void apply_momentum_cpu(KernelContext& ctx) {
  const float lr = static_cast<float>(ctx.attrs().f("learning_rate"));
  const float mu = static_cast<float>(ctx.attrs().f("momentum"));
  const bool nesterov = ctx.attrs().i_or("nesterov", 0) != 0;
  const float* g = ctx.input(0).data<float>();
  Variable::Update w(ctx.var(0));
  Variable::Update v(ctx.var(1));
  ctx.parallel_for(w.size(), kUpdateGrain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      float vi = 0.0f;
      v.apply(i, [&](float old) { return vi = mu * old - lr * g[i]; });
      w.apply(i, [&](float x) { return x + (nesterov ? mu * vi - lr * g[i] : vi); });
    }
  });
}

// Keras' Adam: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; w -= lr_t m / (sqrt(v) + eps) with
// lr_t = lr sqrt(1 - b2^t) / (1 - b1^t).
void apply_adam_cpu(KernelContext& ctx) {
  const double lr = ctx.attrs().f("learning_rate");
  const float b1 = static_cast<float>(ctx.attrs().f("beta1"));
  const float b2 = static_cast<float>(ctx.attrs().f("beta2"));
  const float eps = static_cast<float>(ctx.attrs().f("epsilon"));
  const double t = static_cast<double>(ctx.input(1).data<float>()[0]) + 1.0;
  const float lr_t = static_cast<float>(lr * std::sqrt(1.0 - std::pow(static_cast<double>(b2), t)) /
                                        (1.0 - std::pow(static_cast<double>(b1), t)));
  const float* g = ctx.input(0).data<float>();
  Variable::Update w(ctx.var(0));
  Variable::Update m(ctx.var(1));
  Variable::Update v(ctx.var(2));
  ctx.parallel_for(w.size(), kUpdateGrain, [&](std::int64_t b, std::int64_t e) {
    if (w.data() && m.data() && v.data()) {
      // The locked modes own their buffers: one plain loop the compiler can vectorise.
      float* pw = w.data();
      float* pm = m.data();
      float* pv = v.data();
      for (std::int64_t i = b; i < e; ++i) {
        pm[i] = b1 * pm[i] + (1.0f - b1) * g[i];
        pv[i] = b2 * pv[i] + (1.0f - b2) * g[i] * g[i];
        pw[i] -= lr_t * pm[i] / (std::sqrt(pv[i]) + eps);
      }
      return;
    }
    for (std::int64_t i = b; i < e; ++i) {
      float mi = 0.0f, vi = 0.0f;
      m.apply(i, [&](float old) { return mi = b1 * old + (1.0f - b1) * g[i]; });
      v.apply(i, [&](float old) { return vi = b2 * old + (1.0f - b2) * g[i] * g[i]; });
      w.apply(i, [&](float x) { return x - lr_t * mi / (std::sqrt(vi) + eps); });
    }
  });
}

// var += amount (a float scalar attribute); counts optimizer steps.
void increment_cpu(KernelContext& ctx) {
  Variable::Update w(ctx.var(0));
  const float amount = static_cast<float>(ctx.attrs().f("amount"));
  for (std::int64_t i = 0; i < w.size(); ++i) w.apply(i, [&](float x) { return x + amount; });
}

}  // namespace

TCTL_REGISTER_OP({.name = "ApplySgd", .infer = update_infer, .cpu = apply_sgd_cpu});
TCTL_REGISTER_OP({.name = "ApplyMomentum", .infer = update_infer, .cpu = apply_momentum_cpu});
TCTL_REGISTER_OP({.name = "ApplyAdam", .num_inputs = 2, .infer = update_infer, .cpu = apply_adam_cpu});
TCTL_REGISTER_OP({.name = "Increment", .num_inputs = 0, .infer = update_infer, .cpu = increment_cpu});

}  // namespace tctl::cpu
