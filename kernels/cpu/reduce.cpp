// CPU kernels of the reductions to a scalar (Sum, Mean) and their gradients, which broadcast the scalar back
// (definitions in core/ops/reduce.cpp).
#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {
namespace {

// Summed in index order in double precision by one thread: the order is fixed, so the result is the same
// on any thread count. Reductions here see loss vectors of batch size, where splitting would not pay.
double ordered_sum(const Tensor& x) {
  double s = 0.0;
  const float* p = x.data<float>();
  for (std::int64_t i = 0; i < x.num_elements(); ++i) s += p[i];
  return s;
}

void sum_cpu(KernelContext& ctx) {
  ctx.output().mutable_data<float>()[0] = static_cast<float>(ordered_sum(ctx.input(0)));
}

void mean_cpu(KernelContext& ctx) {
  const std::int64_t n = ctx.input(0).num_elements();
  ctx.output().mutable_data<float>()[0] =
      n == 0 ? 0.0f : static_cast<float>(ordered_sum(ctx.input(0)) / static_cast<double>(n));
}

// Inputs: dy (scalar), x (for the shape). Output: dy * factor everywhere, factor 1 for Sum and 1/n for Mean.
void broadcast_grad(KernelContext& ctx, bool mean) {
  const std::int64_t n = ctx.output_spec().shape.num_elements();
  float v = ctx.input(0).data<float>()[0];
  if (mean && n > 0) v /= static_cast<float>(n);
  float* dx = ctx.output().mutable_data<float>();
  for_each_element(ctx, n, [&](std::int64_t i) { dx[i] = v; });
}

void sum_grad_cpu(KernelContext& ctx) { broadcast_grad(ctx, false); }
void mean_grad_cpu(KernelContext& ctx) { broadcast_grad(ctx, true); }

}  // namespace

TCTL_REGISTER_KERNELS("cpu", {"Sum", sum_cpu}, {"SumGrad", sum_grad_cpu}, {"Mean", mean_cpu},
                      {"MeanGrad", mean_grad_cpu});

}  // namespace tctl::cpu
