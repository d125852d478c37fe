// CPU kernels of dynamic loss scaling's ops (definitions in core/ops/loss_scale.cpp).
#include <algorithm>

#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {
namespace {

constexpr std::int64_t kFiniteGrain = 32768;
constexpr float kMaxLossScale = 0x1p126f;

// 1 when every input is finite (any_non_finite, the optimizers' guard), else 0.
void all_finite_cpu(KernelContext& ctx) {
  bool finite = true;
  for (int k = 0; k < ctx.num_inputs() && finite; ++k)
    finite = !any_non_finite(ctx, ctx.input(k).data<float>(), ctx.input(k).num_elements(), kFiniteGrain);
  ctx.output().mutable_data<float>()[0] = finite ? 1.0f : 0.0f;
}

void loss_scale_factor_cpu(KernelContext& ctx) {
  if (ctx.input(0).data<float>()[0] == 0.0f) return ctx.skip();
  ctx.output().mutable_data<float>()[0] = 1.0f / ctx.input(1).data<float>()[0];
}

void mul_scalar_cpu(KernelContext& ctx) {
  const float s = ctx.input(1).data<float>()[0];
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output().mutable_data<float>();
  for_each_element(ctx, ctx.input(0).num_elements(), [&](std::int64_t i) { y[i] = x[i] * s; });
}

void update_loss_scale_cpu(KernelContext& ctx) {
  const bool finite = ctx.input(0).data<float>()[0] != 0.0f;
  const auto growth = static_cast<float>(ctx.attrs().i("growth_steps"));
  Variable::Update scale(ctx.var(0));
  Variable::Update good(ctx.var(1));
  Variable::Update skipped(ctx.var(2));
  float good_now = 0.0f;
  good.apply(0, [&](float g) { return good_now = finite ? (g + 1.0f >= growth ? 0.0f : g + 1.0f) : 0.0f; });
  if (!finite) {
    scale.apply(0, [](float s) { return std::max(1.0f, s * 0.5f); });
    skipped.apply(0, [](float n) { return n + 1.0f; });
  } else if (good_now == 0.0f) {
    // The scale stays at most 2^126, so its reciprocal, which the gradients are multiplied by, is a normal
    // float (a denormal one flushes to zero); TensorFlow's dynamic scale keeps itself finite alike.
    scale.apply(0, [](float s) { return s * 2.0f <= kMaxLossScale ? s * 2.0f : s; });
  }
}

}  // namespace

TCTL_REGISTER_KERNELS("cpu", {"AllFinite", all_finite_cpu}, {"LossScaleFactor", loss_scale_factor_cpu},
                      {"MulScalar", mul_scalar_cpu}, {"UpdateLossScale", update_loss_scale_cpu});

}  // namespace tctl::cpu
