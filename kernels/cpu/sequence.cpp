// CPU kernels of the sequence ops (definitions in core/ops/sequence.cpp): the global pools over the steps of
// [N, S, C] inputs and their gradients, and the embedding lookup and its gradient. Every output element is
// computed by one thread in a fixed order, so any thread count gives the same bits.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/vector_math.h"

namespace tctl::cpu {
namespace {

struct PoolDims {
  std::int64_t batch, steps, channels;
};
PoolDims pool_dims(const Shape& x) { return {x[0], x[1], x[2]}; }

// fn(c0, c1) for the blocks of 16 columns of a `width`-wide output that sums `rows` rows into its columns
// (a gradient), split over the intra-op pool: each block adds its rows in order, so any split gives the same
// bits.
template <class Fn>
void for_each_column_block(const KernelContext& ctx, std::int64_t width, std::int64_t rows, Fn fn) {
  constexpr std::int64_t kColumnsPerBlock = 16;
  for_each_row_of(ctx, (width + kColumnsPerBlock - 1) / kColumnsPerBlock, rows * kColumnsPerBlock,
                  [&](std::int64_t block) {
                    const std::int64_t c0 = block * kColumnsPerBlock;
                    fn(c0, std::min(width, c0 + kColumnsPerBlock));
                  });
}

// Whether step s of example n is one to pool: every step without a mask, else where the mask holds 1.
inline bool step_kept(const float* mask, std::int64_t n, std::int64_t steps, std::int64_t s) {
  return mask == nullptr || mask[n * steps + s] != 0.0f;
}

// The mean over the kept steps (all of them without a mask); an example with none kept gives zeros.
void global_avg_pool_cpu(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const float* mask = optional_floats(ctx, 1);
  const PoolDims d = pool_dims(x.shape());
  const float* px = x.data<float>();
  float* py = ctx.output().mutable_data<float>();
  for_each_row_of(ctx, d.batch, d.steps * d.channels, [&](std::int64_t n) {
    float* y = py + n * d.channels;
    std::fill(y, y + d.channels, 0.0f);
    std::int64_t count = 0;
    for (std::int64_t s = 0; s < d.steps; ++s) {
      if (!step_kept(mask, n, d.steps, s)) continue;
      ++count;
      const float* row = px + (n * d.steps + s) * d.channels;
      for (std::int64_t c = 0; c < d.channels; ++c) y[c] += row[c];
    }
    const float scale = count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
    for (std::int64_t c = 0; c < d.channels; ++c) y[c] *= scale;
  });
}

void global_avg_pool_grad_cpu(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const float* mask = optional_floats(ctx, 2);
  const PoolDims d = pool_dims(ctx.input(1).shape());
  const float* pdy = dy.data<float>();
  float* pdx = ctx.output().mutable_data<float>();
  for_each_row_of(ctx, d.batch, d.steps * d.channels, [&](std::int64_t n) {
    std::int64_t count = 0;
    for (std::int64_t s = 0; s < d.steps; ++s) count += step_kept(mask, n, d.steps, s) ? 1 : 0;
    const float scale = count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
    const float* g = pdy + n * d.channels;
    for (std::int64_t s = 0; s < d.steps; ++s) {
      float* row = pdx + (n * d.steps + s) * d.channels;
      const float f = step_kept(mask, n, d.steps, s) ? scale : 0.0f;
      for (std::int64_t c = 0; c < d.channels; ++c) row[c] = g[c] * f;
    }
  });
}

// The first kept step of example n, or -1 when it has none.
std::int64_t first_kept_step(const float* mask, std::int64_t n, std::int64_t steps) {
  for (std::int64_t s = 0; s < steps; ++s)
    if (step_kept(mask, n, steps, s)) return s;
  return -1;
}

// The maximum of each channel over the kept steps (zeros for an example with none); a NaN anywhere makes the
// channel's maximum NaN, as TF's.
void global_max_pool_cpu(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const float* mask = optional_floats(ctx, 1);
  const PoolDims d = pool_dims(x.shape());
  const float* px = x.data<float>();
  float* py = ctx.output().mutable_data<float>();
  for_each_row_of(ctx, d.batch, d.steps * d.channels, [&](std::int64_t n) {
    float* y = py + n * d.channels;
    const bool none = first_kept_step(mask, n, d.steps) < 0;
    std::fill(y, y + d.channels, none ? 0.0f : -std::numeric_limits<float>::infinity());
    for (std::int64_t s = 0; s < d.steps; ++s) {
      if (!step_kept(mask, n, d.steps, s)) continue;
      const float* row = px + (n * d.steps + s) * d.channels;
      for (std::int64_t c = 0; c < d.channels; ++c) y[c] = row[c] > y[c] || row[c] != row[c] ? row[c] : y[c];
    }
  });
}

// dy to the first kept step holding each channel's maximum (the first NaN where there is one), zeros
// elsewhere.
void global_max_pool_grad_cpu(KernelContext& ctx) {
  const Tensor& x = ctx.input(1);
  const float* mask = optional_floats(ctx, 2);
  const PoolDims d = pool_dims(x.shape());
  const float* px = x.data<float>();
  const float* pdy = ctx.input(0).data<float>();
  float* pdx = ctx.output().mutable_data<float>();
  for_each_row_of(ctx, d.batch, d.steps * d.channels, [&](std::int64_t n) {
    const float* xs = px + n * d.steps * d.channels;
    float* dx = pdx + n * d.steps * d.channels;
    std::fill(dx, dx + d.steps * d.channels, 0.0f);
    const std::int64_t first = first_kept_step(mask, n, d.steps);
    if (first < 0) return;
    // Steps outer, channels inner, so the input is read in order and the compares vectorize; a channel's
    // best stays at its first NaN (x != x), and moves to a NaN.
    thread_local std::vector<float> value;
    thread_local std::vector<std::int32_t> best;
    value.assign(xs + first * d.channels, xs + (first + 1) * d.channels);
    best.assign(static_cast<std::size_t>(d.channels), static_cast<std::int32_t>(first));
    float* v = value.data();
    std::int32_t* at = best.data();
    for (std::int64_t s = first + 1; s < d.steps; ++s) {
      if (!step_kept(mask, n, d.steps, s)) continue;
      const float* row = xs + s * d.channels;
      for (std::int64_t c = 0; c < d.channels; ++c) {
        const bool take = v[c] == v[c] && (row[c] > v[c] || row[c] != row[c]);
        v[c] = take ? row[c] : v[c];
        at[c] = take ? static_cast<std::int32_t>(s) : at[c];
      }
    }
    for (std::int64_t c = 0; c < d.channels; ++c) dx[at[c] * d.channels + c] = pdy[n * d.channels + c];
  });
}

void token_mask_cpu(KernelContext& ctx) {
  const Tensor& ids = ctx.input(0);
  const float* pi = ids.data<float>();
  float* py = ctx.output().mutable_data<float>();
  for_each_element(ctx, ids.num_elements(), [&](std::int64_t i) { py[i] = pi[i] != 0.0f ? 1.0f : 0.0f; });
}

void embedding_cpu(KernelContext& ctx) {
  const Tensor& table = ctx.input(0);
  const Tensor& ids = ctx.input(1);
  const std::int64_t rows = table.shape()[0], width = table.shape()[1], n = ids.num_elements();
  const float* pt = table.data<float>();
  const float* pi = ids.data<float>();
  float* py = ctx.output().mutable_data<float>();
  for_each_row_of(ctx, n, width, [&](std::int64_t i) {
    std::copy_n(pt + table_row(ctx, pi[i], i, rows) * width, width, py + i * width);
  });
}

// Every id's row of dy summed into the table's row it names, in id order (for_each_column_block).
void embedding_grad_cpu(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const Tensor& ids = ctx.input(1);
  const std::int64_t rows = ctx.output_spec().shape[0], width = ctx.output_spec().shape[1], n = ids.num_elements();
  const float* pdy = dy.data<float>();
  const float* pi = ids.data<float>();
  float* pg = ctx.output().mutable_data<float>();
  std::fill(pg, pg + rows * width, 0.0f);
  for_each_column_block(ctx, width, n, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t i = 0; i < n; ++i) {
      float* g = pg + table_row(ctx, pi[i], i, rows) * width;
      const float* src = pdy + i * width;
      for (std::int64_t c = c0; c < c1; ++c) g[c] += src[c];
    }
  });
}

void position_embedding_cpu(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::int64_t n = x.shape()[0], steps = x.shape()[1], d = x.shape()[2];
  const float* px = x.data<float>();
  const float* table = ctx.input(1).data<float>();
  float* py = ctx.output().mutable_data<float>();
  for_each_row_of(ctx, n * steps, d, [&](std::int64_t i) {
    const float* row = table + (i % steps) * d;
    for (std::int64_t j = 0; j < d; ++j) py[i * d + j] = px[i * d + j] + row[j];
  });
}

// Each step's row summed over the batch in example order, steps split over the pool.
void position_embedding_grad_cpu(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const std::int64_t n = dy.shape()[0], steps = dy.shape()[1], d = dy.shape()[2];
  const std::int64_t rows = ctx.output_spec().shape[0];
  const float* pdy = dy.data<float>();
  float* out = ctx.output().mutable_data<float>();
  std::fill(out + steps * d, out + rows * d, 0.0f);
  for_each_row_of(ctx, steps, n * d, [&](std::int64_t l) {
    float* row = out + l * d;
    std::fill(row, row + d, 0.0f);
    for (std::int64_t k = 0; k < n; ++k)
      for (std::int64_t j = 0; j < d; ++j) row[j] += pdy[(k * steps + l) * d + j];
  });
}

// Each row's mean and 1 / sqrt(variance + epsilon), the variance about the mean (two passes), in vectors
// of kLanes partial sums: the scalar chains of double additions these replaced took 5 % of
// bench_workloads transformer_text_b32's step.
struct RowStats {
  float mean, rstd;
};
RowStats row_stats(const float* x, std::int64_t d, double epsilon) {
  const float mean = row_sum(x, d) / static_cast<float>(d);
  Floats acc{};
  std::int64_t j = 0;
  for (; j + kLanes <= d; j += kLanes) {
    const Floats v = load(x + j) - splat(mean);
    acc += v * v;
  }
  float sq = 0.0f;
  for (int l = 0; l < kLanes; ++l) sq += acc[l];
  for (; j < d; ++j) sq += (x[j] - mean) * (x[j] - mean);
  return {mean, static_cast<float>(1.0 / std::sqrt(static_cast<double>(sq) / static_cast<double>(d) + epsilon))};
}

void layer_norm_cpu(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::int64_t d = x.shape()[x.shape().rank() - 1], rows = d > 0 ? x.num_elements() / d : 0;
  const float* px = x.data<float>();
  const float* gamma = ctx.input(1).data<float>();
  const float* beta = ctx.input(2).data<float>();
  float* py = ctx.output().mutable_data<float>();
  const double epsilon = ctx.attrs().f("epsilon");
  for_each_row_of(ctx, rows, d, [&](std::int64_t r) {
    const float* xr = px + r * d;
    float* yr = py + r * d;
    const RowStats s = row_stats(xr, d, epsilon);
    std::int64_t j = 0;
    for (; j + kLanes <= d; j += kLanes)
      store(yr + j, (load(xr + j) - splat(s.mean)) * splat(s.rstd) * load(gamma + j) + load(beta + j));
    for (; j < d; ++j) yr[j] = (xr[j] - s.mean) * s.rstd * gamma[j] + beta[j];
  });
}

// dx for one row: rstd (g - mean(g) - xhat mean(g xhat)) with g = dy gamma, the means in vectors.
void layer_norm_row_grad(const float* xr, const float* dy, const float* gamma, std::int64_t d, double epsilon,
                         float* dx) {
  const RowStats s = row_stats(xr, d, epsilon);
  Floats g_sum{}, gx_sum{};
  std::int64_t j = 0;
  for (; j + kLanes <= d; j += kLanes) {
    const Floats g = load(dy + j) * load(gamma + j);
    g_sum += g;
    gx_sum += g * (load(xr + j) - splat(s.mean));
  }
  float mean_g = 0.0f, mean_gx = 0.0f;
  for (int l = 0; l < kLanes; ++l) {
    mean_g += g_sum[l];
    mean_gx += gx_sum[l];
  }
  for (std::int64_t t = j; t < d; ++t) {
    mean_g += dy[t] * gamma[t];
    mean_gx += dy[t] * gamma[t] * (xr[t] - s.mean);
  }
  mean_g /= static_cast<float>(d);
  mean_gx *= s.rstd / static_cast<float>(d);
  for (j = 0; j + kLanes <= d; j += kLanes) {
    const Floats xhat = (load(xr + j) - splat(s.mean)) * splat(s.rstd);
    store(dx + j, splat(s.rstd) * (load(dy + j) * load(gamma + j) - splat(mean_g) - xhat * splat(mean_gx)));
  }
  for (; j < d; ++j) {
    const float xhat = (xr[j] - s.mean) * s.rstd;
    dx[j] = s.rstd * (dy[j] * gamma[j] - mean_g - xhat * mean_gx);
  }
}

// wrt 0: dx (layer_norm_row_grad); wrt 1: dgamma = the sum over rows of dy xhat, in column blocks that each
// add the rows in order (the same sums on any pool).
void layer_norm_grad_cpu(KernelContext& ctx) {
  const Tensor& x = ctx.input(1);
  const std::int64_t d = x.shape()[x.shape().rank() - 1], rows = d > 0 ? x.num_elements() / d : 0;
  const float* pdy = ctx.input(0).data<float>();
  const float* px = x.data<float>();
  const float* gamma = ctx.input(2).data<float>();
  float* out = ctx.output().mutable_data<float>();
  const double epsilon = ctx.attrs().f("epsilon");
  if (ctx.attrs().i("wrt") == 0) {
    for_each_row_of(ctx, rows, d, [&](std::int64_t r) {
      layer_norm_row_grad(px + r * d, pdy + r * d, gamma, d, epsilon, out + r * d);
    });
    return;
  }
  // Every row's statistics once, then the column blocks.
  // (The calling thread's buffer, reached through a pointer: a pool thread naming it would get its own.)
  thread_local std::vector<RowStats> buffer;
  buffer.resize(static_cast<std::size_t>(rows));
  RowStats* stats = buffer.data();
  for_each_row_of(ctx, rows, d, [&](std::int64_t r) { stats[r] = row_stats(px + r * d, d, epsilon); });
  std::fill(out, out + d, 0.0f);
  for_each_column_block(ctx, d, rows, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* xr = px + r * d;
      const RowStats st = stats[r];
      for (std::int64_t j = c0; j < c1; ++j) out[j] += pdy[r * d + j] * ((xr[j] - st.mean) * st.rstd);
    }
  });
}

}  // namespace

TCTL_REGISTER_KERNELS("cpu", {"GlobalAvgPool", global_avg_pool_cpu}, {"GlobalAvgPoolGrad", global_avg_pool_grad_cpu},
                      {"GlobalMaxPool", global_max_pool_cpu}, {"GlobalMaxPoolGrad", global_max_pool_grad_cpu},
                      {"Embedding", embedding_cpu}, {"EmbeddingGrad", embedding_grad_cpu},
                      {"TokenMask", token_mask_cpu}, {"PositionEmbedding", position_embedding_cpu},
                      {"PositionEmbeddingGrad", position_embedding_grad_cpu}, {"LayerNorm", layer_norm_cpu},
                      {"LayerNormGrad", layer_norm_grad_cpu});

}  // namespace tctl::cpu
