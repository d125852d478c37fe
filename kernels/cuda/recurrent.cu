// CUDA kernels of the recurrent ops (definitions and the workspace's layout in core/ops/recurrent.h and .cpp,
// CPU kernels in kernels/cpu/recurrent.cpp). The steps run in order from the host: at each, one cuBLAS
// product of the whole batch (h_{t-1} U, or back d h_{t-1} = dG U^T) and one kernel with a thread per
// example and unit for the cell, its exclusions and its gradient, as the CPU computes them (expf and tanhf
// where the CPU has its vector polynomials: within 1e-6). The parameter gradients are one product over every
// example and step (dU = H'^T dG) and column sums in fixed chunks (no atomics). A launch per step costs
// microseconds that cuDNN's fused recurrence would not: the first version, for correctness. Written
// 2026-11-29 on a machine without a GPU: compiled for sm_90, not yet run (scripts/gpu-check.sh compares it
// with the CPU through kernels_tests on one).

#include <cmath>
#include <cstdint>

#include "core/counter_random.h"
#include "core/op_registry.h"
#include "core/ops/recurrent.h"
#include "kernels/cuda/device_math.cuh"

namespace tctl::cuda {
namespace {

using Dims = RecurrentDims;

Dims dims_of(const KernelContext& ctx, const Shape& workspace) { return recurrent_dims(ctx.attrs(), workspace); }

// recurrent_dropout's mask, as the CPU's RecurrentDropMask draws it: element (i, j) of the run's rows is
// draw (offset + i) units + j of the node's stream.
struct DropMask {
  float rate = 0.0f;
  StepKey key;
  std::int64_t offset = 0;
  __device__ float at(std::int64_t i, std::int64_t j, std::int64_t units) const {
    const auto index = static_cast<std::uint64_t>((offset + i) * units + j);
    return uniform_at(key.get(), index) < rate ? 0.0f : 1.0f / (1.0f - rate);
  }
};
DropMask drop_mask(const KernelContext& ctx) {
  DropMask m;
  m.rate = static_cast<float>(ctx.attrs().f_or("recurrent_dropout", 0.0));
  if (m.rate > 0.0f) m.key = step_random_key(ctx, ctx.attrs().i("stream"));
  m.offset = ctx.batch_offset();
  return m;
}

__device__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ bool padding_at(const float* mask, const Dims& d, std::int64_t i, std::int64_t t) {
  return mask != nullptr && mask[i * d.steps + t] == 0.0f;
}

// y = op(A) op(B) + beta y for the whole batch (row_major_gemm), nothing for an empty product.
void product(KernelContext& ctx, bool ta, bool tb, std::int64_t rows, std::int64_t cols, std::int64_t k, const float* a,
             std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* y, std::int64_t ldy) {
  if (rows == 0 || cols == 0 || k == 0) return;
  row_major_gemm(ctx, rows, cols, k, GemmOperand{a, lda, ta}, GemmOperand{b, ldb, tb}, beta, y, ldy);
}

// h_{k-1} m into `out` [N, H], for the product when recurrent_dropout is on.
__global__ void drop_state(const float* ws, float* out, Dims d, std::int64_t k, DropMask m) {
  TCTL_GRID_STRIDE_LOOP(e, d.batch * d.units) {
    const std::int64_t i = e / d.units, j = e % d.units;
    out[e] = ws[d.row(0, i, k - 1) + j] * m.at(i, j, d.units);
  }
}

// Step k of every example: z [N, G H] holds h_{t-1} U (unread at the first step), x the input's product
// [N, T, G H], b the bias; writes the workspace's planes at step k, then carries the states over a padding
// step.
__global__ void cell_step(float* ws, const float* z, const float* x, const float* b, const float* mask, Dims d,
                          std::int64_t k) {
  TCTL_GRID_STRIDE_LOOP(e, d.batch * d.units) {
    const std::int64_t i = e / d.units, j = e % d.units, h = d.units, t = d.time(k);
    const float* xr = x + (i * d.steps + t) * d.columns;
    const float* zr = z + i * d.columns;
    auto zc = [&](std::int64_t c) { return k > 0 ? zr[c] : 0.0f; };
    if (d.cell == RecurrentCell::kLstm) {
      float gate[4];
      for (int g = 0; g < 4; ++g) {
        const float pre = zc(g * h + j) + xr[g * h + j] + b[g * h + j];
        gate[g] = g == 2 ? tanhf(pre) : sigmoid(pre);
        ws[d.row(2 + g, i, k) + j] = gate[g];
      }
      const float c = k > 0 ? mul(gate[1], ws[d.row(1, i, k - 1) + j]) + mul(gate[0], gate[2]) : mul(gate[0], gate[2]);
      ws[d.row(1, i, k) + j] = c;
      ws[d.row(0, i, k) + j] = mul(gate[3], tanhf(c));
    } else if (d.cell == RecurrentCell::kGru) {
      const float* rb = b + d.columns;
      const float rh = zc(2 * h + j) + rb[2 * h + j];
      const float zz = sigmoid(zc(j) + (xr[j] + b[j] + rb[j]));
      const float r = sigmoid(zc(h + j) + (xr[h + j] + b[h + j] + rb[h + j]));
      const float cand = tanhf(xr[2 * h + j] + b[2 * h + j] + mul(r, rh));
      const float prev = k > 0 ? ws[d.row(0, i, k - 1) + j] : 0.0f;
      ws[d.row(0, i, k) + j] = mul(zz, prev) + mul(1.0f - zz, cand);
      ws[d.row(1, i, k) + j] = zz;
      ws[d.row(2, i, k) + j] = r;
      ws[d.row(3, i, k) + j] = cand;
      ws[d.row(4, i, k) + j] = rh;
    } else {
      const float pre = zc(j) + xr[j] + b[j];
      ws[d.row(0, i, k) + j] = d.cell == RecurrentCell::kSimpleTanh ? tanhf(pre) : fmaxf(pre, 0.0f);
    }
    if (!padding_at(mask, d, i, t)) continue;
    for (std::int64_t p = 0; p < (d.cell == RecurrentCell::kLstm ? 2 : 1); ++p)
      ws[d.row(p, i, k) + j] = k > 0 ? ws[d.row(p, i, k - 1) + j] : 0.0f;
  }
}

// Inputs (xp [N, T, G H], U [H, G H], b[, mask]); output the workspace [P, N, T, H].
void recurrence_cuda(KernelContext& ctx) {
  const Dims d = dims_of(ctx, ctx.output().shape());
  if (d.batch * d.steps == 0) return;
  const float* x = in<float>(ctx, 0);
  const float* u = in<float>(ctx, 1);
  const float* b = in<float>(ctx, 2);
  const float* mask = optional_in<float>(ctx, 3);
  const DropMask m = drop_mask(ctx);
  float* ws = out<float>(ctx);
  const Tensor gates = Tensor::empty(DType::kF32, Shape{d.batch * d.columns}, &ctx.device());
  const Tensor dropped = Tensor::empty(DType::kF32, Shape{m.rate > 0.0f ? d.batch * d.units : 1}, &ctx.device());
  auto* z = static_cast<float*>(gates.raw_mutable_data());
  auto* hd = static_cast<float*>(dropped.raw_mutable_data());
  for (std::int64_t k = 0; k < d.steps; ++k) {
    if (k > 0 && m.rate > 0.0f) {
      launch_elements(ctx, d.batch * d.units, drop_state, static_cast<const float*>(ws), hd, d, k, m);
      product(ctx, false, false, d.batch, d.columns, d.units, hd, d.units, u, d.columns, 0.0f, z, d.columns);
    } else if (k > 0) {
      product(ctx, false, false, d.batch, d.columns, d.units, ws + d.row(0, 0, k - 1), d.steps * d.units, u, d.columns,
              0.0f, z, d.columns);
    }
    launch_elements(ctx, d.batch * d.units, cell_step, ws, static_cast<const float*>(z), x, b, mask, d, k);
  }
}

// Step k back for every example: dh [N, H] gets the output's gradient at k added, then the step's d xp
// (and the GRU's recurrent gradient drec [N, G H]) is written and dh, dc move to the step before as far as
// they skip the product; a padding step passes them on untouched and gets zeros.
__global__ void cell_step_back(const float* dws, const float* ws, float* dxp, float* drec, float* dh, float* dc,
                               const float* mask, Dims d, std::int64_t k) {
  TCTL_GRID_STRIDE_LOOP(e, d.batch * d.units) {
    const std::int64_t i = e / d.units, j = e % d.units, h = d.units, t = d.time(k);
    float* g = dxp + (i * d.steps + t) * d.columns;
    float* gr = drec + i * d.columns;
    dh[e] += dws[d.row(0, i, k) + j];
    if (padding_at(mask, d, i, t)) {
      for (std::int64_t c = j; c < d.columns; c += h) g[c] = gr[c] = 0.0f;
      continue;
    }
    if (d.cell == RecurrentCell::kLstm) {
      const float gi = ws[d.row(2, i, k) + j], gf = ws[d.row(3, i, k) + j];
      const float gg = ws[d.row(4, i, k) + j], go = ws[d.row(5, i, k) + j];
      const float tc = tanhf(ws[d.row(1, i, k) + j]);
      const float cp = k > 0 ? ws[d.row(1, i, k - 1) + j] : 0.0f;
      const float dcj = dc[e] + mul(mul(dh[e], go), 1.0f - mul(tc, tc));
      g[j] = mul(mul(mul(dcj, gg), gi), 1.0f - gi);
      g[h + j] = mul(mul(mul(dcj, cp), gf), 1.0f - gf);
      g[2 * h + j] = mul(mul(dcj, gi), 1.0f - mul(gg, gg));
      g[3 * h + j] = mul(mul(mul(dh[e], tc), go), 1.0f - go);
      dc[e] = mul(dcj, gf);
    } else if (d.cell == RecurrentCell::kGru) {
      const float prev = k > 0 ? ws[d.row(0, i, k - 1) + j] : 0.0f;
      const float zz = ws[d.row(1, i, k) + j], r = ws[d.row(2, i, k) + j];
      const float cand = ws[d.row(3, i, k) + j], rh = ws[d.row(4, i, k) + j];
      const float dz = mul(dh[e], prev - cand);
      const float dpre = mul(mul(dh[e], 1.0f - zz), 1.0f - mul(cand, cand));
      g[2 * h + j] = dpre;
      gr[2 * h + j] = mul(dpre, r);
      g[h + j] = gr[h + j] = mul(mul(mul(dpre, rh), r), 1.0f - r);
      g[j] = gr[j] = mul(mul(dz, zz), 1.0f - zz);
      dh[e] = mul(dh[e], zz);
    } else {
      const float o = ws[d.row(0, i, k) + j];
      g[j] = d.cell == RecurrentCell::kSimpleTanh ? mul(dh[e], 1.0f - mul(o, o)) : (o > 0.0f ? dh[e] : 0.0f);
    }
  }
}

// d h_{t-1} from the product (times the dropout mask), into dh for the steps that were not padding: added to
// the GRU's z dh, the whole of it for the other cells.
__global__ void carry_back(float* dh, const float* product_rows, const float* mask, Dims d, std::int64_t k,
                           DropMask m) {
  TCTL_GRID_STRIDE_LOOP(e, d.batch * d.units) {
    const std::int64_t i = e / d.units, j = e % d.units;
    if (padding_at(mask, d, i, d.time(k))) continue;
    float v = product_rows[e];
    if (m.rate > 0.0f) v = mul(v, m.at(i, j, d.units));
    dh[e] = d.cell == RecurrentCell::kGru ? dh[e] + v : v;
  }
}

// Inputs (dws, ws, U[, mask]); output d xp [N, T, G H].
void recurrence_grad_cuda(KernelContext& ctx) {
  const Dims d = dims_of(ctx, ctx.input(1).shape());
  if (d.batch * d.steps == 0) return;
  const float* dws = in<float>(ctx, 0);
  const float* ws = in<float>(ctx, 1);
  const float* u = in<float>(ctx, 2);
  const float* mask = optional_in<float>(ctx, 3);
  const DropMask m = drop_mask(ctx);
  float* dxp = out<float>(ctx);
  const Tensor state = Tensor::empty(DType::kF32, Shape{3 * d.batch * d.units}, &ctx.device());
  const Tensor rec = Tensor::empty(DType::kF32, Shape{d.batch * d.columns}, &ctx.device());
  auto* dh = static_cast<float*>(state.raw_mutable_data());
  float* dc = dh + d.batch * d.units;
  float* dprev = dc + d.batch * d.units;
  auto* drec = static_cast<float*>(rec.raw_mutable_data());
  cudaMemsetAsync(dh, 0, 2 * d.batch * d.units * sizeof(float), stream_of(ctx));
  const bool gru = d.cell == RecurrentCell::kGru;
  for (std::int64_t k = d.steps - 1; k >= 0; --k) {
    launch_elements(ctx, d.batch * d.units, cell_step_back, dws, ws, dxp, drec, dh, dc, mask, d, k);
    if (k == 0) break;
    const std::int64_t t = d.time(k);
    if (gru)
      product(ctx, false, true, d.batch, d.units, d.columns, drec, d.columns, u, d.columns, 0.0f, dprev, d.units);
    else
      product(ctx, false, true, d.batch, d.units, d.columns, dxp + t * d.columns, d.steps * d.columns, u, d.columns,
              0.0f, dprev, d.units);
    launch_elements(ctx, d.batch * d.units, carry_back, dh, static_cast<const float*>(dprev), mask, d, k, m);
  }
}

// Row (i, k - k0) of the recurrent gradient for k in [k0, T): d xp at step k's input time, the GRU's
// candidate columns scaled by its reset gate.
__global__ void recurrent_rows(const float* dxp, const float* ws, float* rows, Dims d, std::int64_t k0) {
  const std::int64_t per = d.steps - k0;
  TCTL_GRID_STRIDE_LOOP(e, d.batch * per * d.columns) {
    const std::int64_t c = e % d.columns, ik = e / d.columns, i = ik / per, k = ik % per + k0;
    float v = dxp[(i * d.steps + d.time(k)) * d.columns + c];
    if (d.cell == RecurrentCell::kGru && c >= 2 * d.units) v = mul(v, ws[d.row(2, i, k) + c - 2 * d.units]);
    rows[e] = v;
  }
}

// Row (i, k - 1) of h_{k-1} (times the dropout mask) for k in [1, T).
__global__ void previous_states(const float* ws, float* out, Dims d, DropMask m) {
  TCTL_GRID_STRIDE_LOOP(e, d.batch * (d.steps - 1) * d.units) {
    const std::int64_t j = e % d.units, ik = e / d.units, i = ik / (d.steps - 1), k = ik % (d.steps - 1) + 1;
    float v = ws[d.row(0, i, k - 1) + j];
    if (m.rate > 0.0f) v = mul(v, m.at(i, j, d.units));
    out[e] = v;
  }
}

// Element (r, c) of a row-major matrix, for column_sums.
struct MatrixAt {
  const float* x;
  std::int64_t cols;
  __device__ float operator()(std::int64_t r, std::int64_t c) const { return x[r * cols + c]; }
};

// Inputs (d xp, ws); attribute wrt: 0 dU = H'^T dG, one product over every example and step from the second
// (H' the states before them, dG their recurrent gradients, both laid out [N, T - 1, ...]); 1 the bias's
// column sums (and the GRU's recurrent bias's, of the recurrent rows of every step).
void recurrence_param_grad_cuda(KernelContext& ctx) {
  const Dims d = dims_of(ctx, ctx.input(1).shape());
  const float* dxp = in<float>(ctx, 0);
  const float* ws = in<float>(ctx, 1);
  float* grad = out<float>(ctx);
  const std::int64_t n = d.batch * d.steps;
  if (ctx.attrs().i("wrt") == 0) {
    if (d.batch == 0 || d.steps < 2) {
      cudaMemsetAsync(grad, 0, ctx.output().bytes(), stream_of(ctx));
      check_launch(ctx);
      return;
    }
    const std::int64_t pairs = d.batch * (d.steps - 1);
    const Tensor rows = Tensor::empty(DType::kF32, Shape{pairs * d.columns}, &ctx.device());
    const Tensor states = Tensor::empty(DType::kF32, Shape{pairs * d.units}, &ctx.device());
    auto* r = static_cast<float*>(rows.raw_mutable_data());
    auto* hs = static_cast<float*>(states.raw_mutable_data());
    launch_elements(ctx, pairs * d.columns, recurrent_rows, dxp, ws, r, d, std::int64_t{1});
    launch_elements(ctx, pairs * d.units, previous_states, ws, hs, d, drop_mask(ctx));
    product(ctx, true, false, d.units, d.columns, pairs, hs, d.units, r, d.columns, 0.0f, grad, d.columns);
    return;
  }
  column_sums(ctx, n, d.columns, MatrixAt{dxp, d.columns}, grad);
  if (d.cell != RecurrentCell::kGru) return;
  const Tensor rows = Tensor::empty(DType::kF32, Shape{std::max<std::int64_t>(1, n * d.columns)}, &ctx.device());
  auto* r = static_cast<float*>(rows.raw_mutable_data());
  launch_elements(ctx, n * d.columns, recurrent_rows, dxp, ws, r, d, std::int64_t{0});
  column_sums(ctx, n, d.columns, MatrixAt{r, d.columns}, grad + d.columns);
}

struct OutputStep {
  bool sequences, reverse, backwards;
};
OutputStep output_step(const KernelContext& ctx) {
  return {ctx.attrs().i("return_sequences") != 0, ctx.attrs().i_or("reverse", 0) != 0,
          ctx.attrs().i_or("go_backwards", 0) != 0};
}

// Output p of example i reads the cell's step k (and input step t, for the mask).
__device__ void step_of(const OutputStep& o, std::int64_t steps, std::int64_t p, std::int64_t& k, std::int64_t& t) {
  k = o.reverse ? steps - 1 - p : p;
  t = o.backwards ? steps - 1 - k : k;
}

// y [N, T, H] (every step) or [N, H] (the last), zeros at padding steps with a mask.
__global__ void recurrence_output(const float* ws, const float* mask, float* y, std::int64_t batch, std::int64_t steps,
                                  std::int64_t units, OutputStep o) {
  const std::int64_t per = o.sequences ? steps * units : units;
  TCTL_GRID_STRIDE_LOOP(e, batch * per) {
    const std::int64_t i = e / per, rest = e % per, j = rest % units;
    if (!o.sequences) {  // the last step run; zeros where it read padding (zero_output_for_mask)
      const std::int64_t t = o.backwards ? 0 : steps - 1;
      y[e] = mask != nullptr && mask[i * steps + t] == 0.0f ? 0.0f : ws[(i * steps + steps - 1) * units + j];
      continue;
    }
    std::int64_t k, t;
    step_of(o, steps, rest / units, k, t);
    y[e] = mask != nullptr && mask[i * steps + t] == 0.0f ? 0.0f : ws[(i * steps + k) * units + j];
  }
}

// dy into plane 0 of a zeroed workspace gradient, where the outputs were read.
__global__ void recurrence_output_grad(const float* dy, const float* mask, float* g, std::int64_t batch,
                                       std::int64_t steps, std::int64_t units, OutputStep o) {
  const std::int64_t per = o.sequences ? steps * units : units;
  TCTL_GRID_STRIDE_LOOP(e, batch * per) {
    const std::int64_t i = e / per, rest = e % per, j = rest % units;
    if (!o.sequences) {
      const std::int64_t t = o.backwards ? 0 : steps - 1;
      if (mask == nullptr || mask[i * steps + t] != 0.0f) g[(i * steps + steps - 1) * units + j] = dy[e];
      continue;
    }
    std::int64_t k, t;
    step_of(o, steps, rest / units, k, t);
    if (mask == nullptr || mask[i * steps + t] != 0.0f) g[(i * steps + k) * units + j] = dy[e];
  }
}

void recurrence_output_cuda(KernelContext& ctx) {
  const Shape& s = ctx.input(0).shape();
  const OutputStep o = output_step(ctx);
  launch_elements(ctx, ctx.output().num_elements(), recurrence_output, in<float>(ctx, 0), optional_in<float>(ctx, 1),
                  out<float>(ctx), s[1], s[2], s[3], o);
}

// Inputs (dy, ws[, mask]).
void recurrence_output_grad_cuda(KernelContext& ctx) {
  const Shape& s = ctx.input(1).shape();
  const OutputStep o = output_step(ctx);
  cudaMemsetAsync(out<float>(ctx), 0, ctx.output().bytes(), stream_of(ctx));
  launch_elements(ctx, ctx.input(0).num_elements(), recurrence_output_grad, in<float>(ctx, 0),
                  optional_in<float>(ctx, 2), out<float>(ctx), s[1], s[2], s[3], o);
}

}  // namespace

TCTL_REGISTER_KERNELS("cuda", {"Recurrence", recurrence_cuda}, {"RecurrenceGrad", recurrence_grad_cuda},
                      {"RecurrenceParamGrad", recurrence_param_grad_cuda}, {"RecurrenceOutput", recurrence_output_cuda},
                      {"RecurrenceOutputGrad", recurrence_output_grad_cuda});

}  // namespace tctl::cuda
