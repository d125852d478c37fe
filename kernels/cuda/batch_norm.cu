// CUDA kernels of batch normalization over the last axis: the batch statistics (BatchNormMean,
// BatchNormVariance, and their masked forms), the normalization (BatchNorm), the moving-average update
// (AssignMovingAverage) and their gradients (definitions in core/ops/batch_norm.cpp, CPU kernels in
// kernels/cpu/batch_norm.cpp).
//
// The CPU sums each channel over the rows in row order, in double. Here one block sums 32 channels, each
// over 32 interleaved row lanes in double, then adds the lanes in a fixed tree: the same bits on every run,
// but not the CPU's order, so a statistic or a parameter gradient may differ from the CPU's by the rounding
// of its double sum (at most an ulp of the float result, and rarely that). The elementwise kernels and
// AssignMovingAverage compute the CPU's formulas with each product and sum rounded apart (no FMA): the
// CPU's bits for the same inputs.
#include "core/ceil_div.h"
#include "core/errors.h"
#include "core/op_registry.h"
#include "core/variable.h"
#include "kernels/cuda/device_math.cuh"

namespace tctl::cuda {
namespace {

constexpr int kTile = 32;   // channels per block: a warp reads 32 neighbours in a row
constexpr int kLanes = 32;  // row lanes per channel, added by a tree of 5 levels
constexpr int kSumThreads = kTile * kLanes;

// finish(j, sum over rows r of term(r, j)) for every channel j, the sum in double.
template <class Term, class Finish>
__global__ void __launch_bounds__(kSumThreads)
    channel_sums(std::int64_t rows, std::int64_t channels, Term term, Finish finish) {
  __shared__ double partial[kLanes][kTile];
  const std::int64_t j = blockIdx.x * static_cast<std::int64_t>(kTile) + threadIdx.x;
  double s = 0.0;
  if (j < channels)
    for (std::int64_t r = threadIdx.y; r < rows; r += kLanes) s = __dadd_rn(s, term(r, j));
  partial[threadIdx.y][threadIdx.x] = s;
  for (int half = kLanes / 2; half > 0; half /= 2) {
    __syncthreads();
    if (threadIdx.y < half) partial[threadIdx.y][threadIdx.x] += partial[threadIdx.y + half][threadIdx.x];
  }
  if (threadIdx.y == 0 && j < channels) finish(j, partial[0][threadIdx.x]);
}

template <class Term, class Finish>
void launch_channel_sums(const KernelContext& ctx, std::int64_t rows, std::int64_t channels, Term term, Finish finish) {
  if (channels > 0)
    channel_sums<<<static_cast<unsigned>(ceil_div(channels, kTile)), dim3(kTile, kLanes), 0, stream_of(ctx)>>>(
        rows, channels, term, finish);
  check_launch(ctx);
}

// x [..., C] as rows of C channels.
struct Rows {
  std::int64_t rows, channels;
};
Rows rows_of(const Tensor& x) {
  const std::int64_t c = x.shape()[x.shape().rank() - 1];
  return {c == 0 ? 0 : x.num_elements() / c, c};
}

struct Value {
  const float* x;
  std::int64_t c;
  __device__ double operator()(std::int64_t r, std::int64_t j) const { return x[r * c + j]; }
};

struct SquaredDeviation {
  const float* x;
  const double* mean;
  std::int64_t c;
  __device__ double operator()(std::int64_t r, std::int64_t j) const {
    const double d = x[r * c + j] - mean[j];
    return __dmul_rn(d, d);
  }
};

// dy (x - mean): the float difference, then the product in double, as the CPU computes it.
struct DyCentered {
  const float* dy;
  const float* x;
  const float* mean;
  std::int64_t c;
  __device__ double operator()(std::int64_t r, std::int64_t j) const {
    return __dmul_rn(dy[r * c + j], __fsub_rn(x[r * c + j], mean[j]));
  }
};

// out[j] = sum / rows, as T.
template <class T>
struct Average {
  T* out;
  double rows;
  __device__ void operator()(std::int64_t j, double sum) const { out[j] = static_cast<T>(sum / rows); }
};

// Room for c doubles on the device (there is no float64 dtype: int64 has their size).
Tensor doubles(const KernelContext& ctx, std::int64_t c) { return Tensor::empty(DType::kI64, Shape{c}, &ctx.device()); }

// The per-channel mean of x in double, in a scratch tensor.
Tensor channel_means(const KernelContext& ctx, const Tensor& x) {
  const Rows s = rows_of(x);
  Tensor mean = doubles(ctx, s.channels);
  launch_channel_sums(ctx, s.rows, s.channels, Value{static_cast<const float*>(x.raw_data()), s.channels},
                      Average<double>{static_cast<double*>(mean.raw_mutable_data()), static_cast<double>(s.rows)});
  return mean;
}

void mean_cuda(KernelContext& ctx) {
  const Rows s = rows_of(ctx.input(0));
  launch_channel_sums(ctx, s.rows, s.channels, Value{in<float>(ctx, 0), s.channels},
                      Average<float>{out<float>(ctx), static_cast<double>(s.rows)});
}

// The biased variance, two passes as on the CPU.
void variance_cuda(KernelContext& ctx) {
  const Rows s = rows_of(ctx.input(0));
  const Tensor mean = channel_means(ctx, ctx.input(0));
  launch_channel_sums(ctx, s.rows, s.channels,
                      SquaredDeviation{in<float>(ctx, 0), static_cast<const double*>(mean.raw_data()), s.channels},
                      Average<float>{out<float>(ctx), static_cast<double>(s.rows)});
}

struct MeanGrad {
  const float* dm;
  float* dx;
  std::int64_t c;
  float inv;
  __device__ void operator()(std::int64_t i) const { dx[i] = dm[i % c] * inv; }
};

// Inputs (d mean, x): every element gets d mean / rows.
void mean_grad_cuda(KernelContext& ctx) {
  const Rows s = rows_of(ctx.input(1));
  launch_each(ctx, s.rows * s.channels,
              MeanGrad{in<float>(ctx, 0), out<float>(ctx), s.channels, 1.0f / static_cast<float>(s.rows)});
}

struct VarianceGrad {
  const float* dv;
  const float* x;
  const double* mean;
  float* dx;
  std::int64_t c;
  float scale;
  __device__ void operator()(std::int64_t i) const {
    const std::int64_t j = i % c;
    dx[i] = dv[j] * scale * (x[i] - static_cast<float>(mean[j]));
  }
};

// Inputs (d var, x): 2 (x - mean) / rows times d var.
void variance_grad_cuda(KernelContext& ctx) {
  const Rows s = rows_of(ctx.input(1));
  const Tensor mean = channel_means(ctx, ctx.input(1));
  launch_each(ctx, s.rows * s.channels,
              VarianceGrad{in<float>(ctx, 0), in<float>(ctx, 1), static_cast<const double*>(mean.raw_data()),
                           out<float>(ctx), s.channels, 2.0f / static_cast<float>(s.rows)});
}

// Keras 3's masked moments (BatchNormMaskedMean, BatchNormMaskedVariance): sums over the rows of x [N, S, C]
// whose mask [N, S] holds 1, divided by the kept count plus Keras' epsilon, 1e-7; the CPU's formulas, the
// sums in the tree above.
constexpr double kMaskEpsilon = 1e-7;

struct MaskWeight {
  const float* mask;
  __device__ double operator()(std::int64_t r, std::int64_t) const { return mask[r]; }
};

struct MaskedValue {
  const float* x;
  const float* mask;
  std::int64_t c;
  __device__ double operator()(std::int64_t r, std::int64_t j) const {
    return __dmul_rn(mask[r], static_cast<double>(x[r * c + j]));
  }
};

struct MaskedSquaredDeviation {
  const float* x;
  const float* mask;
  const double* mean;
  std::int64_t c;
  __device__ double operator()(std::int64_t r, std::int64_t j) const {
    const double d = __dsub_rn(x[r * c + j], mean[j]);
    return __dmul_rn(__dmul_rn(mask[r], d), d);
  }
};

struct MaskedDeviation {
  const float* x;
  const float* mask;
  const double* mean;
  std::int64_t c;
  __device__ double operator()(std::int64_t r, std::int64_t j) const {
    return __dmul_rn(mask[r], __dsub_rn(x[r * c + j], mean[j]));
  }
};

// out[0] = sum + 1e-7: the divisor.
struct PlusEpsilon {
  double* out;
  __device__ void operator()(std::int64_t, double sum) const { out[0] = __dadd_rn(sum, kMaskEpsilon); }
};

// out[j] = sum / divisor, as T.
template <class T>
struct OverDivisor {
  T* out;
  const double* divisor;
  __device__ void operator()(std::int64_t j, double sum) const { out[j] = static_cast<T>(__ddiv_rn(sum, *divisor)); }
};

// The kept rows' count plus 1e-7, one double on the device.
Tensor mask_divisor(const KernelContext& ctx, std::int64_t rows, const float* mask) {
  Tensor divisor = doubles(ctx, 1);
  launch_channel_sums(ctx, rows, 1, MaskWeight{mask}, PlusEpsilon{static_cast<double*>(divisor.raw_mutable_data())});
  return divisor;
}

const double* as_doubles(const Tensor& t) { return static_cast<const double*>(t.raw_data()); }

// The per-channel masked means of x in double, in a scratch tensor.
Tensor masked_means(const KernelContext& ctx, const Tensor& x, const float* mask, const double* divisor) {
  const Rows s = rows_of(x);
  Tensor mean = doubles(ctx, s.channels);
  launch_channel_sums(ctx, s.rows, s.channels, MaskedValue{static_cast<const float*>(x.raw_data()), mask, s.channels},
                      OverDivisor<double>{static_cast<double*>(mean.raw_mutable_data()), divisor});
  return mean;
}

void masked_mean_cuda(KernelContext& ctx) {
  const Rows s = rows_of(ctx.input(0));
  const Tensor divisor = mask_divisor(ctx, s.rows, in<float>(ctx, 1));
  launch_channel_sums(ctx, s.rows, s.channels, MaskedValue{in<float>(ctx, 0), in<float>(ctx, 1), s.channels},
                      OverDivisor<float>{out<float>(ctx), as_doubles(divisor)});
}

void masked_variance_cuda(KernelContext& ctx) {
  const Rows s = rows_of(ctx.input(0));
  const Tensor divisor = mask_divisor(ctx, s.rows, in<float>(ctx, 1));
  const Tensor mean = masked_means(ctx, ctx.input(0), in<float>(ctx, 1), as_doubles(divisor));
  launch_channel_sums(ctx, s.rows, s.channels,
                      MaskedSquaredDeviation{in<float>(ctx, 0), in<float>(ctx, 1), as_doubles(mean), s.channels},
                      OverDivisor<float>{out<float>(ctx), as_doubles(divisor)});
}

struct MaskedMeanGrad {
  const float* dm;
  const float* mask;
  const double* divisor;
  float* dx;
  std::int64_t c;
  __device__ void operator()(std::int64_t i) const {
    dx[i] = static_cast<float>(__ddiv_rn(__fmul_rn(dm[i % c], mask[i / c]), *divisor));
  }
};

// Inputs (d mean, x, mask): a kept element gets d mean / divisor, padding nothing.
void masked_mean_grad_cuda(KernelContext& ctx) {
  const Rows s = rows_of(ctx.input(1));
  const Tensor divisor = mask_divisor(ctx, s.rows, in<float>(ctx, 2));
  launch_each(ctx, s.rows * s.channels,
              MaskedMeanGrad{in<float>(ctx, 0), in<float>(ctx, 2), as_doubles(divisor), out<float>(ctx), s.channels});
}

struct MaskedVarianceGrad {
  const float* dv;
  const float* x;
  const float* mask;
  const double* divisor;
  const double* mean;
  const double* shift;
  float* dx;
  std::int64_t c;
  __device__ void operator()(std::int64_t i) const {
    const std::int64_t j = i % c;
    const double scale = __ddiv_rn(__dmul_rn(__dmul_rn(dv[j], 2.0), mask[i / c]), *divisor);
    dx[i] = static_cast<float>(__dmul_rn(scale, __dsub_rn(__dsub_rn(x[i], mean[j]), shift[j])));
  }
};

// Inputs (d var, x, mask): 2 m / divisor ((x - mean) - shift) times d var, the shift sum m (x - mean) /
// divisor (kernels/cpu/batch_norm.cpp says why it is not zero).
void masked_variance_grad_cuda(KernelContext& ctx) {
  const Rows s = rows_of(ctx.input(1));
  const float* mask = in<float>(ctx, 2);
  const Tensor divisor = mask_divisor(ctx, s.rows, mask);
  const Tensor mean = masked_means(ctx, ctx.input(1), mask, as_doubles(divisor));
  Tensor shift = doubles(ctx, s.channels);
  launch_channel_sums(ctx, s.rows, s.channels, MaskedDeviation{in<float>(ctx, 1), mask, as_doubles(mean), s.channels},
                      OverDivisor<double>{static_cast<double*>(shift.raw_mutable_data()), as_doubles(divisor)});
  launch_each(ctx, s.rows * s.channels,
              MaskedVarianceGrad{in<float>(ctx, 0), in<float>(ctx, 1), mask, as_doubles(divisor), as_doubles(mean),
                                 as_doubles(shift), out<float>(ctx), s.channels});
}

// 1 / sqrt(variance + epsilon) in double, rounded to float, as the CPU computes it (both IEEE-exact).
__device__ float inverse_std(float variance, double epsilon) {
  return static_cast<float>(1.0 / sqrt(static_cast<double>(variance) + epsilon));
}

struct InverseStd {
  const float* variance;
  float* rstd;
  double epsilon;
  __device__ void operator()(std::int64_t j) const { rstd[j] = inverse_std(variance[j], epsilon); }
};

// The per-channel 1 / sqrt(variance + epsilon) of input `variance`, with the node's epsilon.
Tensor inverse_stds(const KernelContext& ctx, int variance) {
  const std::int64_t c = ctx.input(variance).num_elements();
  Tensor rstd = Tensor::empty(DType::kF32, Shape{c}, &ctx.device());
  launch_each(
      ctx, c,
      InverseStd{in<float>(ctx, variance), static_cast<float*>(rstd.raw_mutable_data()), ctx.attrs().f("epsilon")});
  return rstd;
}

struct Normalize {
  const float* x;
  const float* mean;
  const float* rstd;
  const float* gamma;
  const float* beta;
  float* y;
  std::int64_t c;
  __device__ void operator()(std::int64_t i) const {
    const std::int64_t j = i % c;
    y[i] = __fadd_rn(__fmul_rn((x[i] - mean[j]) * rstd[j], gamma[j]), beta[j]);
  }
};

// Inputs x, mean, variance, gamma, beta: y = gamma (x - mean) / sqrt(variance + epsilon) + beta.
void batch_norm_cuda(KernelContext& ctx) {
  const Rows s = rows_of(ctx.input(0));
  const Tensor rstd = inverse_stds(ctx, 2);
  launch_each(ctx, s.rows * s.channels,
              Normalize{in<float>(ctx, 0), in<float>(ctx, 1), static_cast<const float*>(rstd.raw_data()),
                        in<float>(ctx, 3), in<float>(ctx, 4), out<float>(ctx), s.channels});
}

struct InputGrad {
  const float* dy;
  const float* gamma;
  const float* rstd;
  float* dx;
  std::int64_t c;
  __device__ void operator()(std::int64_t i) const { dx[i] = dy[i] * gamma[i % c] * rstd[i % c]; }
};

// The gradient of BatchNorm's input `wrt` (1 mean, 2 variance, 3 gamma) from its channel sum s, in double
// with the CPU's order of operations.
struct ParameterGrad {
  const float* gamma;
  const float* variance;
  float* out;
  double epsilon;
  std::int64_t wrt;
  __device__ void operator()(std::int64_t j, double s) const {
    const double r = inverse_std(variance[j], epsilon);
    if (wrt == 1) out[j] = static_cast<float>(-s * gamma[j] * r);
    if (wrt == 2) out[j] = static_cast<float>(-0.5 * s * gamma[j] * r * r * r);
    if (wrt == 3) out[j] = static_cast<float>(s * r);
  }
};

// Inputs (dy, x, mean, variance, gamma); attribute "wrt" picks the input of BatchNorm differentiated:
// 0 x, 1 mean, 2 variance, 3 gamma.
void batch_norm_grad_cuda(KernelContext& ctx) {
  const Rows s = rows_of(ctx.input(1));
  const std::int64_t wrt = ctx.attrs().i("wrt");
  const double epsilon = ctx.attrs().f("epsilon");
  if (wrt == 0) {
    const Tensor rstd = inverse_stds(ctx, 3);
    launch_each(ctx, s.rows * s.channels,
                InputGrad{in<float>(ctx, 0), in<float>(ctx, 4), static_cast<const float*>(rstd.raw_data()),
                          out<float>(ctx), s.channels});
    return;
  }
  const ParameterGrad finish{in<float>(ctx, 4), in<float>(ctx, 3), out<float>(ctx), epsilon, wrt};
  if (wrt == 1) {
    launch_channel_sums(ctx, s.rows, s.channels, Value{in<float>(ctx, 0), s.channels}, finish);
    return;
  }
  launch_channel_sums(ctx, s.rows, s.channels,
                      DyCentered{in<float>(ctx, 0), in<float>(ctx, 1), in<float>(ctx, 2), s.channels}, finish);
}

// var = momentum var + (1 - momentum) value; by compare-and-swap where the variable's mode has concurrent
// writers that must lose no update (the CPU's compare_exchange, on the same bits).
struct MovingAverage {
  float* var;
  const float* value;
  float momentum, rest;  // rest = 1 - momentum, in float as on the CPU
  bool cas;
  __device__ float next(float old, std::int64_t i) const {
    return __fadd_rn(__fmul_rn(momentum, old), __fmul_rn(rest, value[i]));
  }
  __device__ void operator()(std::int64_t i) const {
    if (!cas) {
      var[i] = next(var[i], i);
      return;
    }
    int* cell = reinterpret_cast<int*>(var + i);
    int old = *cell, assumed = 0;
    do {
      assumed = old;
      old = atomicCAS(cell, assumed, __float_as_int(next(__int_as_float(assumed), i)));
    } while (old != assumed);
  }
};

// Input: the batch statistic. The output is unused, as on the CPU. The update holds the variable's lock
// while the kernel is queued; the stream orders what comes after.
void assign_moving_average_cuda(KernelContext& ctx) {
  const float momentum = static_cast<float>(ctx.attrs().f("momentum"));
  TCTL_CHECK(ctx.var(0).device() == &ctx.device(), "AssignMovingAverage's variable is not on its node's device");
  const Variable::Update u(ctx.var(0));
  const bool cas = u.lock_free() && u.compare_and_swap();
  launch_each(ctx, u.size(), MovingAverage{u.device_data(), in<float>(ctx, 0), momentum, 1.0f - momentum, cas});
}

}  // namespace

TCTL_REGISTER_KERNELS("cuda", {"BatchNorm", batch_norm_cuda}, {"BatchNormGrad", batch_norm_grad_cuda},
                      {"BatchNormMean", mean_cuda}, {"BatchNormMeanGrad", mean_grad_cuda},
                      {"BatchNormVariance", variance_cuda}, {"BatchNormVarianceGrad", variance_grad_cuda},
                      {"BatchNormMaskedMean", masked_mean_cuda}, {"BatchNormMaskedMeanGrad", masked_mean_grad_cuda},
                      {"BatchNormMaskedVariance", masked_variance_cuda},
                      {"BatchNormMaskedVarianceGrad", masked_variance_grad_cuda},
                      {"AssignMovingAverage", assign_moving_average_cuda});

}  // namespace tctl::cuda
