// CUDA kernels of the sequence ops (definitions in core/ops/sequence.cpp, CPU kernels in
// kernels/cpu/sequence.cpp): the padding mask, the embedding lookups and their gradients, the global pools
// over steps and theirs, and LayerNorm and its gradients. Written 2026-11-29 on a machine without a GPU:
// compiled for sm_90, not yet run (scripts/gpu-check.sh runs kernels_tests against the CPU on one).
//
// Every sum that the CPU adds in a fixed order is added here in the same order by one thread (the pools, the
// embeddings' gradients, the position table's), so those give the CPU's bits. LayerNorm's row statistics are
// warp trees where the CPU adds in vectors, and gamma's gradient sums in chunks of rows: within
// device_tolerance's default 1e-5.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/op_registry.h"
#include "kernels/cuda/device_math.cuh"

namespace tctl::cuda {
namespace {

__global__ void token_mask(const float* ids, float* y, std::int64_t n) {
  TCTL_GRID_STRIDE_LOOP(i, n) y[i] = ids[i] != 0.0f ? 1.0f : 0.0f;
}

void token_mask_cuda(KernelContext& ctx) {
  const std::int64_t n = ctx.output().num_elements();
  launch_elements(ctx, n, token_mask, in<float>(ctx, 0), out<float>(ctx), n);
}

// Whether an id names a row of a table of `rows`: a whole number in [0, rows).
__device__ bool id_fits(float id, std::int64_t rows) {
  return id >= 0.0f && id < static_cast<float>(rows) && id == floorf(id);
}

// y[i, c] = table[ids[i], c]. An id that names no row gives NaN there, and the first such element is noted
// in *first_bad as its index << 32 | the id's bits, which the host turns into the CPU's error.
__global__ void embedding_rows(const float* table, const float* ids, float* y, std::int64_t n, std::int64_t width,
                               std::int64_t rows, unsigned long long* first_bad) {
  TCTL_GRID_STRIDE_LOOP(e, n * width) {
    const std::int64_t i = e / width, c = e % width;
    const float id = ids[i];
    if (id_fits(id, rows)) {
      y[e] = table[static_cast<std::int64_t>(id) * width + c];
      continue;
    }
    y[e] = NAN;
    if (c == 0) {
      std::uint32_t bits;
      std::memcpy(&bits, &id, sizeof bits);
      atomicMin(first_bad, static_cast<unsigned long long>(i) << 32 | bits);
    }
  }
}

void embedding_cuda(KernelContext& ctx) {
  const Tensor& table = ctx.input(0);
  const std::int64_t rows = table.shape()[0], width = table.shape()[1], n = ctx.input(1).num_elements();
  if (n * width == 0) {
    check_launch(ctx);
    return;
  }
  const Tensor word = Tensor::empty(DType::kI64, Shape{1}, &ctx.device());
  auto* first_bad = static_cast<unsigned long long*>(word.raw_mutable_data());
  cudaMemsetAsync(first_bad, 0xff, sizeof *first_bad, stream_of(ctx));
  launch_elements(ctx, n * width, embedding_rows, in<float>(ctx, 0), in<float>(ctx, 1), out<float>(ctx), n, width, rows,
                  first_bad);
  device_of(ctx).enqueue_report(first_bad, sizeof *first_bad, [node = ctx.node().name, rows](const void* host) {
    const unsigned long long key = *static_cast<const unsigned long long*>(host);
    if (key == ~0ULL) return;
    const auto bits = static_cast<std::uint32_t>(key & 0xffffffffULL);
    float id;
    std::memcpy(&id, &bits, sizeof id);
    throw RuntimeError(node + ": id " + std::to_string(id) + " (element " + std::to_string(key >> 32) +
                       " of its input) is not a whole number in [0, " + std::to_string(rows) +
                       "), the embedding's input_dim");
  });
}

// One warp per row r of the table's gradient: the warp reads the ids 32 at a time and adds, in id order,
// the row of dy of every id that names r, each lane its columns: the CPU's sums in the CPU's order. The
// forward lookup has refused any id that names no row.
__global__ void embedding_grad_rows(const float* dy, const float* ids, float* g, std::int64_t n, std::int64_t width,
                                    std::int64_t rows) {
  TCTL_WARP_ROW_LOOP(r, rows) {
    float* out = g + r * width;
    for (std::int64_t c = lane_id(); c < width; c += kWarp) out[c] = 0.0f;
    for (std::int64_t i0 = 0; i0 < n; i0 += kWarp) {
      const std::int64_t i = i0 + lane_id();
      const bool hit = i < n && ids[i] == static_cast<float>(r);
      unsigned hits = __ballot_sync(0xffffffffu, hit);
      while (hits != 0) {
        const int b = __ffs(hits) - 1;
        hits &= hits - 1;
        const float* src = dy + (i0 + b) * width;
        for (std::int64_t c = lane_id(); c < width; c += kWarp) out[c] += src[c];
      }
    }
  }
}

// Inputs (dy, ids, table); the output has the table's shape.
void embedding_grad_cuda(KernelContext& ctx) {
  const std::int64_t rows = ctx.output().shape()[0], width = ctx.output().shape()[1];
  launch_rows(ctx, rows, embedding_grad_rows, in<float>(ctx, 0), in<float>(ctx, 1), out<float>(ctx),
              ctx.input(1).num_elements(), width, rows);
}

// y[n, l, d] = x[n, l, d] + table[l, d].
__global__ void position_embedding(const float* x, const float* table, float* y, std::int64_t total, std::int64_t steps,
                                   std::int64_t width) {
  TCTL_GRID_STRIDE_LOOP(e, total) y[e] = x[e] + table[(e / width) % steps * width + e % width];
}

void position_embedding_cuda(KernelContext& ctx) {
  const Shape& s = ctx.input(0).shape();
  const std::int64_t total = ctx.output().num_elements();
  launch_elements(ctx, total, position_embedding, in<float>(ctx, 0), in<float>(ctx, 1), out<float>(ctx), total, s[1],
                  s[2]);
}

// Element (l, d) of the table's gradient: dy[n, l, d] summed over the batch in example order; rows from the
// sequence's length on are zeros.
__global__ void position_embedding_grad(const float* dy, float* g, std::int64_t table_rows, std::int64_t batch,
                                        std::int64_t steps, std::int64_t width) {
  TCTL_GRID_STRIDE_LOOP(e, table_rows * width) {
    const std::int64_t l = e / width, d = e % width;
    float s = 0.0f;
    if (l < steps)
      for (std::int64_t k = 0; k < batch; ++k) s += dy[(k * steps + l) * width + d];
    g[e] = s;
  }
}

// Inputs (dy, table); the output has the table's shape.
void position_embedding_grad_cuda(KernelContext& ctx) {
  const Shape& s = ctx.input(0).shape();
  const std::int64_t table_rows = ctx.output().shape()[0];
  launch_elements(ctx, table_rows * s[2], position_embedding_grad, in<float>(ctx, 0), out<float>(ctx), table_rows, s[0],
                  s[1], s[2]);
}

// The pools: one thread per (example, channel), over the steps in order, as the CPU.
struct PoolDims {
  std::int64_t batch, steps, channels;
};
PoolDims pool_dims(const Shape& x) { return {x[0], x[1], x[2]}; }

__device__ bool step_kept(const float* mask, std::int64_t n, std::int64_t steps, std::int64_t s) {
  return mask == nullptr || mask[n * steps + s] != 0.0f;
}

// 1 / the number of kept steps of example n, or 0 when it has none.
__device__ float kept_scale(const float* mask, std::int64_t n, std::int64_t steps) {
  std::int64_t count = 0;
  for (std::int64_t s = 0; s < steps; ++s) count += step_kept(mask, n, steps, s) ? 1 : 0;
  return count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
}

__global__ void global_avg_pool(const float* x, const float* mask, float* y, PoolDims d) {
  TCTL_GRID_STRIDE_LOOP(e, d.batch * d.channels) {
    const std::int64_t n = e / d.channels, c = e % d.channels;
    float s = 0.0f;
    for (std::int64_t t = 0; t < d.steps; ++t)
      if (step_kept(mask, n, d.steps, t)) s += x[(n * d.steps + t) * d.channels + c];
    y[e] = mul(s, kept_scale(mask, n, d.steps));
  }
}

__global__ void global_avg_pool_grad(const float* dy, const float* mask, float* dx, PoolDims d) {
  TCTL_GRID_STRIDE_LOOP(e, d.batch * d.channels) {
    const std::int64_t n = e / d.channels, c = e % d.channels;
    const float scale = kept_scale(mask, n, d.steps);
    for (std::int64_t t = 0; t < d.steps; ++t)
      dx[(n * d.steps + t) * d.channels + c] = mul(dy[e], step_kept(mask, n, d.steps, t) ? scale : 0.0f);
  }
}

// The maximum over the kept steps (zeros with none); a NaN makes the channel's maximum NaN, as the CPU's.
__global__ void global_max_pool(const float* x, const float* mask, float* y, PoolDims d) {
  TCTL_GRID_STRIDE_LOOP(e, d.batch * d.channels) {
    const std::int64_t n = e / d.channels, c = e % d.channels;
    bool any = false;
    float best = -INFINITY;
    for (std::int64_t t = 0; t < d.steps; ++t) {
      if (!step_kept(mask, n, d.steps, t)) continue;
      any = true;
      const float v = x[(n * d.steps + t) * d.channels + c];
      best = v > best || v != v ? v : best;
    }
    y[e] = any ? best : 0.0f;
  }
}

// dy to the first kept step holding the maximum (the first NaN where there is one), zeros elsewhere.
__global__ void global_max_pool_grad(const float* dy, const float* x, const float* mask, float* dx, PoolDims d) {
  TCTL_GRID_STRIDE_LOOP(e, d.batch * d.channels) {
    const std::int64_t n = e / d.channels, c = e % d.channels;
    std::int64_t at = -1;
    float best = 0.0f;
    for (std::int64_t t = 0; t < d.steps; ++t) {
      const std::int64_t i = (n * d.steps + t) * d.channels + c;
      dx[i] = 0.0f;
      if (!step_kept(mask, n, d.steps, t)) continue;
      const float v = x[i];
      if (at < 0 || (best == best && (v > best || v != v))) {
        best = v;
        at = t;
      }
    }
    if (at >= 0) dx[(n * d.steps + at) * d.channels + c] = dy[e];
  }
}

void global_avg_pool_cuda(KernelContext& ctx) {
  const PoolDims d = pool_dims(ctx.input(0).shape());
  launch_elements(ctx, d.batch * d.channels, global_avg_pool, in<float>(ctx, 0), optional_in<float>(ctx, 1),
                  out<float>(ctx), d);
}
void global_avg_pool_grad_cuda(KernelContext& ctx) {
  const PoolDims d = pool_dims(ctx.input(1).shape());
  launch_elements(ctx, d.batch * d.channels, global_avg_pool_grad, in<float>(ctx, 0), optional_in<float>(ctx, 2),
                  out<float>(ctx), d);
}
void global_max_pool_cuda(KernelContext& ctx) {
  const PoolDims d = pool_dims(ctx.input(0).shape());
  launch_elements(ctx, d.batch * d.channels, global_max_pool, in<float>(ctx, 0), optional_in<float>(ctx, 1),
                  out<float>(ctx), d);
}
void global_max_pool_grad_cuda(KernelContext& ctx) {
  const PoolDims d = pool_dims(ctx.input(1).shape());
  launch_elements(ctx, d.batch * d.channels, global_max_pool_grad, in<float>(ctx, 0), in<float>(ctx, 1),
                  optional_in<float>(ctx, 2), out<float>(ctx), d);
}

// A row's mean and 1 / sqrt(variance + epsilon), the variance about the mean, by one warp; every lane gets
// them. rstd in double, as the CPU.
struct RowStats {
  float mean, rstd;
};
__device__ RowStats warp_row_stats(const float* x, std::int64_t d, double epsilon) {
  float s = 0.0f;
  for (std::int64_t j = lane_id(); j < d; j += kWarp) s += x[j];
  const float mean = warp_sum(s) / static_cast<float>(d);
  float sq = 0.0f;
  for (std::int64_t j = lane_id(); j < d; j += kWarp) {
    const float v = x[j] - mean;
    sq += mul(v, v);
  }
  sq = warp_sum(sq);
  return {mean, static_cast<float>(1.0 / sqrt(static_cast<double>(sq) / static_cast<double>(d) + epsilon))};
}

__global__ void layer_norm_rows(const float* x, const float* gamma, const float* beta, float* y, std::int64_t rows,
                                std::int64_t d, double epsilon) {
  TCTL_WARP_ROW_LOOP(r, rows) {
    const float* xr = x + r * d;
    const RowStats s = warp_row_stats(xr, d, epsilon);
    for (std::int64_t j = lane_id(); j < d; j += kWarp)
      y[r * d + j] = mul(mul(xr[j] - s.mean, s.rstd), gamma[j]) + beta[j];
  }
}

// dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy gamma, a warp per row.
__global__ void layer_norm_grad_rows(const float* dy, const float* x, const float* gamma, float* dx, std::int64_t rows,
                                     std::int64_t d, double epsilon) {
  TCTL_WARP_ROW_LOOP(r, rows) {
    const float* xr = x + r * d;
    const float* dyr = dy + r * d;
    const RowStats s = warp_row_stats(xr, d, epsilon);
    float g_sum = 0.0f, gx_sum = 0.0f;
    for (std::int64_t j = lane_id(); j < d; j += kWarp) {
      const float g = mul(dyr[j], gamma[j]);
      g_sum += g;
      gx_sum += mul(g, xr[j] - s.mean);
    }
    const float mean_g = warp_sum(g_sum) / static_cast<float>(d);
    const float mean_gx = mul(warp_sum(gx_sum), s.rstd) / static_cast<float>(d);
    for (std::int64_t j = lane_id(); j < d; j += kWarp) {
      const float xhat = mul(xr[j] - s.mean, s.rstd);
      dx[r * d + j] = mul(s.rstd, mul(dyr[j], gamma[j]) - mean_g - mul(xhat, mean_gx));
    }
  }
}

// Each row's statistics, for gamma's gradient.
__global__ void layer_norm_stats(const float* x, RowStats* stats, std::int64_t rows, std::int64_t d, double epsilon) {
  TCTL_WARP_ROW_LOOP(r, rows) {
    const RowStats s = warp_row_stats(x + r * d, d, epsilon);
    if (lane_id() == 0) stats[r] = s;
  }
}

// Element (r, c) of dy xhat, whose column sums are gamma's gradient.
struct GammaTerm {
  const float* dy;
  const float* x;
  const RowStats* stats;
  std::int64_t d;
  __device__ float operator()(std::int64_t r, std::int64_t c) const {
    return mul(dy[r * d + c], mul(x[r * d + c] - stats[r].mean, stats[r].rstd));
  }
};

struct NormDims {
  std::int64_t rows, d;
};
NormDims norm_dims(const Tensor& x) {
  const std::int64_t d = x.shape()[x.shape().rank() - 1];
  return {d > 0 ? x.num_elements() / d : 0, d};
}

void layer_norm_cuda(KernelContext& ctx) {
  const NormDims n = norm_dims(ctx.input(0));
  launch_rows(ctx, n.rows, layer_norm_rows, in<float>(ctx, 0), in<float>(ctx, 1), in<float>(ctx, 2), out<float>(ctx),
              n.rows, n.d, ctx.attrs().f("epsilon"));
}

// Inputs (dy, x, gamma); attribute wrt: 0 x, 1 gamma.
void layer_norm_grad_cuda(KernelContext& ctx) {
  const NormDims n = norm_dims(ctx.input(1));
  const double epsilon = ctx.attrs().f("epsilon");
  if (ctx.attrs().i("wrt") == 0) {
    launch_rows(ctx, n.rows, layer_norm_grad_rows, in<float>(ctx, 0), in<float>(ctx, 1), in<float>(ctx, 2),
                out<float>(ctx), n.rows, n.d, epsilon);
    return;
  }
  const Tensor stats = Tensor::empty(DType::kF32, Shape{std::max<std::int64_t>(1, 2 * n.rows)}, &ctx.device());
  auto* s = static_cast<RowStats*>(stats.raw_mutable_data());
  launch_rows(ctx, n.rows, layer_norm_stats, in<float>(ctx, 1), s, n.rows, n.d, epsilon);
  // dgamma: the column sums of dy xhat (column_sums: fixed chunks, no atomics).
  column_sums(ctx, n.rows, n.d, GammaTerm{in<float>(ctx, 0), in<float>(ctx, 1), s, n.d}, out<float>(ctx));
}

}  // namespace

TCTL_REGISTER_KERNELS("cuda", {"TokenMask", token_mask_cuda}, {"Embedding", embedding_cuda},
                      {"EmbeddingGrad", embedding_grad_cuda}, {"PositionEmbedding", position_embedding_cuda},
                      {"PositionEmbeddingGrad", position_embedding_grad_cuda}, {"GlobalAvgPool", global_avg_pool_cuda},
                      {"GlobalAvgPoolGrad", global_avg_pool_grad_cuda}, {"GlobalMaxPool", global_max_pool_cuda},
                      {"GlobalMaxPoolGrad", global_max_pool_grad_cuda}, {"LayerNorm", layer_norm_cuda},
                      {"LayerNormGrad", layer_norm_grad_cuda});

}  // namespace tctl::cuda
