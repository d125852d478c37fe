// CPU kernels of batch normalization over the last axis: the batch statistics (BatchNormMean,
// BatchNormVariance, and over the steps a mask keeps, BatchNormMaskedMean and BatchNormMaskedVariance), the
// normalization itself (BatchNorm) and the moving-average update of the inference statistics
// (AssignMovingAverage), with their gradients (definitions in core/ops/batch_norm.cpp).
#include <vector>

#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {
namespace {

std::int64_t channels_of(const Tensor& x) { return x.shape()[x.shape().rank() - 1]; }

// out[j] = sum over rows r of f(r, j), in row order and in double; split over columns only, so no sum is
// ever cut and the result is the same on any thread count.
template <class Fn>
void column_sums(const KernelContext& ctx, std::int64_t rows, std::int64_t cols, double* out, Fn f) {
  ctx.parallel_for(cols, std::max<std::int64_t>(1, kElementwiseGrain / std::max<std::int64_t>(rows, 1)),
                   [&](std::int64_t begin, std::int64_t end) {
                     for (std::int64_t j = begin; j < end; ++j) out[j] = 0.0;
                     for (std::int64_t r = 0; r < rows; ++r)
                       for (std::int64_t j = begin; j < end; ++j) out[j] += f(r, j);
                   });
}

// Per-channel mean of x over all axes but the last.
std::vector<double> channel_means(const KernelContext& ctx, const Tensor& x) {
  const std::int64_t c = channels_of(x), rows = x.num_elements() / c;
  const float* px = x.data<float>();
  std::vector<double> mean(static_cast<std::size_t>(c));
  column_sums(ctx, rows, c, mean.data(), [&](std::int64_t r, std::int64_t j) { return px[r * c + j]; });
  for (auto& m : mean) m /= static_cast<double>(rows);
  return mean;
}

// Applies fn(r, j, i) to every element i = r * c + j of x, split over rows.
template <class Fn>
void for_each_row_element(const KernelContext& ctx, std::int64_t rows, std::int64_t c, Fn fn) {
  ctx.parallel_for(rows, std::max<std::int64_t>(1, kElementwiseGrain / c), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r)
      for (std::int64_t j = 0; j < c; ++j) fn(r, j, r * c + j);
  });
}

void mean_cpu(KernelContext& ctx) {
  const std::vector<double> mean = channel_means(ctx, ctx.input(0));
  float* out = ctx.output().mutable_data<float>();
  for (std::size_t j = 0; j < mean.size(); ++j) out[j] = static_cast<float>(mean[j]);
}

// The biased (population) variance, as Keras normalizes with and feeds to its moving variance; two passes,
// so a large mean does not cancel the digits of a small variance.
void variance_cpu(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::int64_t c = channels_of(x), rows = x.num_elements() / c;
  const std::vector<double> mean = channel_means(ctx, x);
  const float* px = x.data<float>();
  std::vector<double> var(static_cast<std::size_t>(c));
  column_sums(ctx, rows, c, var.data(), [&](std::int64_t r, std::int64_t j) {
    const double d = px[r * c + j] - mean[static_cast<std::size_t>(j)];
    return d * d;
  });
  float* out = ctx.output().mutable_data<float>();
  for (std::int64_t j = 0; j < c; ++j)
    out[j] = static_cast<float>(var[static_cast<std::size_t>(j)] / static_cast<double>(rows));
}

// Inputs (d mean, x): every element gets d mean / rows.
void mean_grad_cpu(KernelContext& ctx) {
  const float* dm = ctx.input(0).data<float>();
  const Tensor& x = ctx.input(1);
  const std::int64_t c = channels_of(x), rows = x.num_elements() / c;
  const float inv = 1.0f / static_cast<float>(rows);
  float* dx = ctx.output().mutable_data<float>();
  for_each_row_element(ctx, rows, c, [&](std::int64_t, std::int64_t j, std::int64_t i) { dx[i] = dm[j] * inv; });
}

// Inputs (d var, x): d var / dx = 2 (x - mean) / rows; the path through the mean adds nothing, because the
// deviations sum to zero.
void variance_grad_cpu(KernelContext& ctx) {
  const float* dv = ctx.input(0).data<float>();
  const Tensor& x = ctx.input(1);
  const std::int64_t c = channels_of(x), rows = x.num_elements() / c;
  const std::vector<double> mean = channel_means(ctx, x);
  const float* px = x.data<float>();
  const float scale = 2.0f / static_cast<float>(rows);
  float* dx = ctx.output().mutable_data<float>();
  for_each_row_element(ctx, rows, c, [&](std::int64_t, std::int64_t j, std::int64_t i) {
    dx[i] = dv[j] * scale * (px[i] - static_cast<float>(mean[static_cast<std::size_t>(j)]));
  });
}

// Keras 3's masked moments (BatchNormMaskedMean and BatchNormMaskedVariance, core/ops/batch_norm.cpp): over
// the rows of x [N, S, C] whose mask [N, S] holds 1, each sum divided by the kept rows' count plus Keras'
// epsilon, 1e-7. Sums in double, split over channels only, as the plain moments.
constexpr double kMaskEpsilon = 1e-7;

struct MaskedMoments {
  const float* x;
  const float* mask;
  std::int64_t c, rows;
  double divisor;             // sum of the mask + 1e-7
  std::vector<double> mean;   // per channel
  std::vector<double> shift;  // sum m (x - mean) / divisor per channel, for the variance's gradient
};

// The kept rows' count plus 1e-7: the mask's sum, in order.
double mask_divisor(const Tensor& mask) {
  const float* m = mask.data<float>();
  double kept = 0;
  for (std::int64_t r = 0; r < mask.num_elements(); ++r) kept += m[r];
  return kept + kMaskEpsilon;
}

MaskedMoments masked_moments(const KernelContext& ctx, const Tensor& x, const Tensor& mask, bool shift) {
  MaskedMoments o{x.data<float>(), mask.data<float>(), channels_of(x), 0, mask_divisor(mask), {}, {}};
  o.rows = x.num_elements() / o.c;
  o.mean.resize(static_cast<std::size_t>(o.c));
  column_sums(ctx, o.rows, o.c, o.mean.data(),
              [&](std::int64_t r, std::int64_t j) { return static_cast<double>(o.mask[r]) * o.x[r * o.c + j]; });
  for (double& m : o.mean) m /= o.divisor;
  if (shift) {
    o.shift.resize(static_cast<std::size_t>(o.c));
    column_sums(ctx, o.rows, o.c, o.shift.data(), [&](std::int64_t r, std::int64_t j) {
      return o.mask[r] * (o.x[r * o.c + j] - o.mean[static_cast<std::size_t>(j)]);
    });
    for (double& d : o.shift) d /= o.divisor;
  }
  return o;
}

void masked_mean_cpu(KernelContext& ctx) {
  const MaskedMoments o = masked_moments(ctx, ctx.input(0), ctx.input(1), false);
  float* out = ctx.output().mutable_data<float>();
  for (std::size_t j = 0; j < o.mean.size(); ++j) out[j] = static_cast<float>(o.mean[j]);
}

void masked_variance_cpu(KernelContext& ctx) {
  const MaskedMoments o = masked_moments(ctx, ctx.input(0), ctx.input(1), false);
  std::vector<double> var(static_cast<std::size_t>(o.c));
  column_sums(ctx, o.rows, o.c, var.data(), [&](std::int64_t r, std::int64_t j) {
    const double d = o.x[r * o.c + j] - o.mean[static_cast<std::size_t>(j)];
    return o.mask[r] * d * d;
  });
  float* out = ctx.output().mutable_data<float>();
  for (std::size_t j = 0; j < var.size(); ++j) out[j] = static_cast<float>(var[j] / o.divisor);
}

// Inputs (d mean, x, mask): a kept element gets d mean / divisor, padding nothing.
void masked_mean_grad_cpu(KernelContext& ctx) {
  const float* dm = ctx.input(0).data<float>();
  const Tensor& x = ctx.input(1);
  const float* mask = ctx.input(2).data<float>();
  const std::int64_t c = channels_of(x), rows = x.num_elements() / c;
  const double divisor = mask_divisor(ctx.input(2));
  float* dx = ctx.output().mutable_data<float>();
  for_each_row_element(ctx, rows, c, [&](std::int64_t r, std::int64_t j, std::int64_t i) {
    dx[i] = static_cast<float>(dm[j] * mask[r] / divisor);
  });
}

// Inputs (d var, x, mask): d var / dx_i = 2 m_i / divisor ((x_i - mean) - shift). The shift, the path through
// the mean, is not zero here: the divisor's epsilon leaves the kept deviations' sum a little off zero.
void masked_variance_grad_cpu(KernelContext& ctx) {
  const float* dv = ctx.input(0).data<float>();
  const MaskedMoments o = masked_moments(ctx, ctx.input(1), ctx.input(2), true);
  float* dx = ctx.output().mutable_data<float>();
  for_each_row_element(ctx, o.rows, o.c, [&](std::int64_t r, std::int64_t j, std::int64_t i) {
    const auto k = static_cast<std::size_t>(j);
    dx[i] = static_cast<float>(dv[j] * 2.0 * o.mask[r] / o.divisor * ((o.x[i] - o.mean[k]) - o.shift[k]));
  });
}

// 1 / sqrt(variance + epsilon) per channel.
std::vector<float> inverse_std(const Tensor& variance, double epsilon) {
  const float* v = variance.data<float>();
  std::vector<float> out(static_cast<std::size_t>(variance.num_elements()));
  for (std::size_t j = 0; j < out.size(); ++j)
    out[j] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(v[j]) + epsilon));
  return out;
}

// y = gamma (x - mean) / sqrt(variance + epsilon) + beta.
void batch_norm_cpu(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::int64_t c = channels_of(x), rows = x.num_elements() / c;
  const std::vector<float> rstd = inverse_std(ctx.input(2), ctx.attrs().f("epsilon"));
  const float* px = x.data<float>();
  const float* mean = ctx.input(1).data<float>();
  const float* gamma = ctx.input(3).data<float>();
  const float* beta = ctx.input(4).data<float>();
  float* y = ctx.output().mutable_data<float>();
  for_each_row_element(ctx, rows, c, [&](std::int64_t, std::int64_t j, std::int64_t i) {
    y[i] = (px[i] - mean[j]) * rstd[static_cast<std::size_t>(j)] * gamma[j] + beta[j];
  });
}

// Inputs (dy, x, mean, variance, gamma); attribute "wrt" picks the input of BatchNorm differentiated:
// 0 x, 1 mean, 2 variance, 3 gamma. (Beta's gradient is BiasAddGrad of dy.)
void batch_norm_grad_cpu(KernelContext& ctx) {
  const float* dy = ctx.input(0).data<float>();
  const Tensor& x = ctx.input(1);
  const std::int64_t c = channels_of(x), rows = x.num_elements() / c;
  const std::vector<float> rstd = inverse_std(ctx.input(3), ctx.attrs().f("epsilon"));
  const float* px = x.data<float>();
  const float* mean = ctx.input(2).data<float>();
  const float* gamma = ctx.input(4).data<float>();
  float* out = ctx.output().mutable_data<float>();
  const std::int64_t wrt = ctx.attrs().i("wrt");
  if (wrt == 0) {
    for_each_row_element(ctx, rows, c, [&](std::int64_t, std::int64_t j, std::int64_t i) {
      out[i] = dy[i] * gamma[j] * rstd[static_cast<std::size_t>(j)];
    });
    return;
  }
  std::vector<double> sums(static_cast<std::size_t>(c));
  if (wrt == 1) {
    column_sums(ctx, rows, c, sums.data(), [&](std::int64_t r, std::int64_t j) { return dy[r * c + j]; });
  } else {
    column_sums(ctx, rows, c, sums.data(), [&](std::int64_t r, std::int64_t j) {
      return static_cast<double>(dy[r * c + j]) * (px[r * c + j] - mean[j]);
    });
  }
  for (std::int64_t j = 0; j < c; ++j) {
    const double s = sums[static_cast<std::size_t>(j)], r = rstd[static_cast<std::size_t>(j)];
    if (wrt == 1) out[j] = static_cast<float>(-s * gamma[j] * r);
    if (wrt == 2) out[j] = static_cast<float>(-0.5 * s * gamma[j] * r * r * r);
    if (wrt == 3) out[j] = static_cast<float>(s * r);
  }
}

// var = momentum var + (1 - momentum) value, through the variable's locking mode; Keras' update of the
// moving statistics. The output is unused.
void assign_moving_average_cpu(KernelContext& ctx) {
  const float momentum = static_cast<float>(ctx.attrs().f("momentum"));
  const float* value = ctx.input(0).data<float>();
  Variable::Update v(ctx.var(0));
  for (std::int64_t i = 0; i < v.size(); ++i)
    v.apply(i, [&](float old) { return momentum * old + (1.0f - momentum) * value[i]; });
}

}  // namespace

TCTL_REGISTER_KERNELS("cpu", {"BatchNorm", batch_norm_cpu}, {"BatchNormGrad", batch_norm_grad_cpu},
                      {"BatchNormMean", mean_cpu}, {"BatchNormMeanGrad", mean_grad_cpu},
                      {"BatchNormVariance", variance_cpu}, {"BatchNormVarianceGrad", variance_grad_cpu},
                      {"BatchNormMaskedMean", masked_mean_cpu}, {"BatchNormMaskedMeanGrad", masked_mean_grad_cpu},
                      {"BatchNormMaskedVariance", masked_variance_cpu},
                      {"BatchNormMaskedVarianceGrad", masked_variance_grad_cpu},
                      {"AssignMovingAverage", assign_moving_average_cpu});

}  // namespace tctl::cpu
