// CPU kernels of the recurrent ops (definitions and the workspace's layout in core/ops/recurrent.h and .cpp).
//
// The examples of a batch are independent through time, so Recurrence and RecurrenceGrad cut the batch into
// blocks of kRowBlock examples and run each block through every step on one thread: no thread waits for
// another at each step, and each block's h_{t-1} U is one small product kept in cache. The cut depends only
// on the batch, so any thread count computes the same bits. The parameter gradients sum the same blocks apart
// and add the blocks' sums in block order.
#include <cblas.h>

#include <algorithm>
#include <cstdint>

#include "core/counter_random.h"
#include "core/ops/recurrent.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/small_product.h"
#include "kernels/cpu/vector_math.h"

namespace tctl::cpu {
namespace {

// 32 ran bench_workloads lstm_text_b64 2-3 % faster at batch 64 but leaves a batch of 32 one block, on one
// thread (bench/README.md, "Figures behind the constants in the code").
constexpr std::int64_t kRowBlock = 16;

enum class RecurrentScratch {
  kGates,
  kProduct,
  kCarry,
  kCellCarry,
  kRow,
  kColumns,
  kTransposed,
  kParts,
  kDropMask,
  kDropped,
  kParamProduct,
  kCount
};

using Dims = RecurrentDims;

Dims dims_of(const KernelContext& ctx, const Shape& workspace) { return recurrent_dims(ctx.attrs(), workspace); }

// recurrent_dropout's mask (core/ops/recurrent.h): one row of H per example, the same at every step, drawn
// from the node's stream by the example's place in the whole batch, so the three kernels that read it (and
// data-parallel replicas) draw the same one.
class RecurrentDropMask {
 public:
  explicit RecurrentDropMask(const KernelContext& ctx)
      : rate_(static_cast<float>(ctx.attrs().f_or("recurrent_dropout", 0.0))),
        key_(rate_ > 0.0f ? ctx.random_key(ctx.attrs().i("stream")) : 0),
        offset_(ctx.batch_offset()) {}
  bool active() const { return rate_ > 0.0f; }
  // The mask's rows for examples [first, first + rows): 0 (dropped) or 1 / (1 - rate).
  void fill(float* m, std::int64_t first, std::int64_t rows, std::int64_t units) const {
    const float keep = 1.0f / (1.0f - rate_);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < units; ++j) {
        const auto index = static_cast<std::uint64_t>((offset_ + first + r) * units + j);
        m[r * units + j] = uniform_at(key_, index) < rate_ ? 0.0f : keep;
      }
  }

 private:
  float rate_;
  std::uint64_t key_;
  std::int64_t offset_;
};

// Row k of example i in plane p of a workspace.
template <class T>
T* plane(T* ws, const Dims& d, std::int64_t p, std::int64_t i, std::int64_t k) {
  return ws + d.row(p, i, k);
}

// fn(first, end) for each block of kRowBlock examples, over the intra-op pool.
template <class Fn>
void for_each_row_block(const KernelContext& ctx, std::int64_t batch, Fn fn) {
  const std::int64_t blocks = (batch + kRowBlock - 1) / kRowBlock;
  ctx.parallel_for(blocks, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t block = b; block < e; ++block) fn(block * kRowBlock, std::min(batch, (block + 1) * kRowBlock));
  });
}

// kLanes floats from p, or the first n of them (the rest read as zeros) at a row's end.
Floats load_lanes(const float* p, std::int64_t n) {
  if (n == kLanes) return load(p);
  float pad[kLanes] = {};
  std::copy_n(p, n, pad);
  return load(pad);
}
void store_lanes(float* p, Floats v, std::int64_t n) {
  if (n == kLanes) return store(p, v);
  float pad[kLanes];
  store(pad, v);
  std::copy_n(pad, n, p);
}

// One step of one example: z holds h_{t-1} U on entry (zeros at the first step); x is the step's input
// product, b the bias; writes the workspace's planes at step k. The gates, the cell and the output go kLanes
// units at a time in one pass, each plane written once (bench_workloads lstm_text_b64: a pass per gate and
// two more for the cell and tanh(c) took 6 % of the step).
void lstm_step(const Dims& d, float* ws, std::int64_t i, std::int64_t k, float* z, const float* x, const float* b) {
  const std::int64_t h = d.units;
  float* out = plane(ws, d, 0, i, k);
  float* cell = plane(ws, d, 1, i, k);
  float* gate[4];
  for (std::int64_t g = 0; g < 4; ++g) gate[g] = plane(ws, d, 2 + g, i, k);
  const float* prev = k > 0 ? plane(ws, d, 1, i, k - 1) : nullptr;
  for (std::int64_t j = 0; j < h; j += kLanes) {
    const std::int64_t n = std::min<std::int64_t>(kLanes, h - j);
    auto pre = [&](std::int64_t g) {
      return load_lanes(z + g * h + j, n) + load_lanes(x + g * h + j, n) + load_lanes(b + g * h + j, n);
    };
    const Floats gi = vector_sigmoid(pre(0)), gf = vector_sigmoid(pre(1));
    const Floats gg = vector_tanh(pre(2)), go = vector_sigmoid(pre(3));
    const Floats c = prev != nullptr ? gf * load_lanes(prev + j, n) + gi * gg : gi * gg;
    store_lanes(gate[0] + j, gi, n);
    store_lanes(gate[1] + j, gf, n);
    store_lanes(gate[2] + j, gg, n);
    store_lanes(gate[3] + j, go, n);
    store_lanes(cell + j, c, n);
    store_lanes(out + j, go * vector_tanh(c), n);
  }
}

// z holds h_{t-1} U; b is [input bias | recurrent bias].
void gru_step(const Dims& d, float* ws, std::int64_t i, std::int64_t k, float* z, const float* x, const float* b) {
  const std::int64_t h = d.units;
  const float* rb = b + d.columns;
  float* rh = plane(ws, d, 4, i, k);
  for (std::int64_t j = 0; j < h; ++j) rh[j] = z[2 * h + j] + rb[2 * h + j];
  for (std::int64_t c = 0; c < 2 * h; ++c) z[c] += x[c] + b[c] + rb[c];
  sigmoid_in_place(z, 2 * h);
  float* cand = plane(ws, d, 3, i, k);
  for (std::int64_t j = 0; j < h; ++j) cand[j] = x[2 * h + j] + b[2 * h + j] + z[h + j] * rh[j];
  tanh_in_place(cand, h);
  float* out = plane(ws, d, 0, i, k);
  const float* prev = k > 0 ? plane(ws, d, 0, i, k - 1) : nullptr;
  for (std::int64_t j = 0; j < h; ++j) out[j] = z[j] * (prev ? prev[j] : 0.0f) + (1.0f - z[j]) * cand[j];
  std::copy_n(z, h, plane(ws, d, 1, i, k));
  std::copy_n(z + h, h, plane(ws, d, 2, i, k));
}

void simple_step(const Dims& d, float* ws, std::int64_t i, std::int64_t k, float* z, const float* x, const float* b) {
  float* out = plane(ws, d, 0, i, k);
  for (std::int64_t j = 0; j < d.units; ++j) out[j] = z[j] + x[j] + b[j];
  if (d.cell == RecurrentCell::kSimpleTanh)
    tanh_in_place(out, d.units);
  else
    for (std::int64_t j = 0; j < d.units; ++j) out[j] = std::max(out[j], 0.0f);
}

// A padding step (mask 0) of example i: its states are the previous step's, zeros before the first.
void carry_states(const Dims& d, float* ws, std::int64_t i, std::int64_t k) {
  for (std::int64_t p = 0; p < (d.cell == RecurrentCell::kLstm ? 2 : 1); ++p) {
    float* now = plane(ws, d, p, i, k);
    if (k == 0)
      std::fill(now, now + d.units, 0.0f);
    else
      std::copy_n(plane(ws, d, p, i, k - 1), d.units, now);
  }
}

void recurrence_cpu(KernelContext& ctx) {
  const Tensor& xp = ctx.input(0);
  const float* u = ctx.input(1).data<float>();
  const float* b = ctx.input(2).data<float>();
  const float* mask = optional_floats(ctx, 3);
  Tensor& out = ctx.output();
  const Dims d = dims_of(ctx, out.shape());
  const float* px = xp.data<float>();
  float* ws = out.mutable_data<float>();
  auto step = d.cell == RecurrentCell::kLstm ? lstm_step : d.cell == RecurrentCell::kGru ? gru_step : simple_step;
  const RecurrentDropMask drop(ctx);
  // U in panels, once for every step of every block (small_product.h). The calling thread's, read by the
  // pool's threads through the reference.
  thread_local PackedPanels packed;
  packed.pack(d.units, d.columns, u, d.columns, std::min(kRowBlock, d.batch));
  const PackedPanels& packed_u = packed;
  for_each_row_block(ctx, d.batch, [&](std::int64_t first, std::int64_t end) {
    const std::int64_t rows = end - first, h = d.units;
    float* z = thread_scratch(rows * d.columns, RecurrentScratch::kGates);
    float* m = drop.active() ? thread_scratch(rows * h, RecurrentScratch::kDropMask) : nullptr;
    float* dropped = drop.active() ? thread_scratch(rows * h, RecurrentScratch::kDropped) : nullptr;
    if (m != nullptr) drop.fill(m, first, rows, h);
    for (std::int64_t k = 0; k < d.steps; ++k) {
      if (k == 0) {
        std::fill(z, z + rows * d.columns, 0.0f);
      } else if (m == nullptr) {
        product_in_place(rows, plane(ws, d, 0, first, k - 1), d.steps * h, packed_u, z, d.columns);
      } else {
        // (h_{t-1} m) U: the dropped state feeds the product only; the GRU's z h_{t-1} keeps it whole.
        for (std::int64_t r = 0; r < rows; ++r) {
          const float* prev = plane(ws, d, 0, first + r, k - 1);
          for (std::int64_t j = 0; j < h; ++j) dropped[r * h + j] = prev[j] * m[r * h + j];
        }
        product_in_place(rows, dropped, h, packed_u, z, d.columns);
      }
      const std::int64_t t = d.time(k);
      for (std::int64_t r = 0; r < rows; ++r) {
        step(d, ws, first + r, k, z + r * d.columns, px + ((first + r) * d.steps + t) * d.columns, b);
        if (mask != nullptr && mask[(first + r) * d.steps + t] == 0.0f) carry_states(d, ws, first + r, k);
      }
    }
  });
}

// One step of one example back: dh is d loss / d h at this step (the output's gradient and the next step's);
// writes the step's d xp to g and, for the GRU, the gradient of h_{t-1} U + b_r to drec and the part of
// d h_{t-1} that skips the product (z dh) to dh. dc carries the LSTM's cell gradient.
void lstm_step_back(const Dims& d, const float* ws, std::int64_t i, std::int64_t k, float* __restrict dh,
                    float* __restrict dc, float* __restrict g, float*) {
  const std::int64_t h = d.units;
  const float* cell = plane(ws, d, 1, i, k);
  const float* prev = k > 0 ? plane(ws, d, 1, i, k - 1) : nullptr;
  const float* gi = plane(ws, d, 2, i, k);
  const float* gf = plane(ws, d, 3, i, k);
  const float* gg = plane(ws, d, 4, i, k);
  const float* go = plane(ws, d, 5, i, k);
  // tanh(c), and c_{t-1} (zeros at the first step) so the loop has no branch.
  float* __restrict tc = thread_scratch(2 * h, RecurrentScratch::kRow);
  std::copy_n(cell, h, tc);
  tanh_in_place(tc, h);
  if (prev == nullptr) std::fill(tc + h, tc + 2 * h, 0.0f);
  const float* __restrict cp = prev != nullptr ? prev : tc + h;
  for (std::int64_t j = 0; j < h; ++j) {
    const float dcj = dc[j] + dh[j] * go[j] * (1.0f - tc[j] * tc[j]);
    g[j] = dcj * gg[j] * gi[j] * (1.0f - gi[j]);
    g[h + j] = dcj * cp[j] * gf[j] * (1.0f - gf[j]);
    g[2 * h + j] = dcj * gi[j] * (1.0f - gg[j] * gg[j]);
    g[3 * h + j] = dh[j] * tc[j] * go[j] * (1.0f - go[j]);
    dc[j] = dcj * gf[j];
  }
}

void gru_step_back(const Dims& d, const float* ws, std::int64_t i, std::int64_t k, float* dh, float*, float* g,
                   float* drec) {
  const std::int64_t h = d.units;
  const float* prev = k > 0 ? plane(ws, d, 0, i, k - 1) : nullptr;
  const float* z = plane(ws, d, 1, i, k);
  const float* r = plane(ws, d, 2, i, k);
  const float* cand = plane(ws, d, 3, i, k);
  const float* rh = plane(ws, d, 4, i, k);
  for (std::int64_t j = 0; j < h; ++j) {
    const float dz = dh[j] * ((prev ? prev[j] : 0.0f) - cand[j]);
    const float dpre = dh[j] * (1.0f - z[j]) * (1.0f - cand[j] * cand[j]);
    g[2 * h + j] = dpre;
    drec[2 * h + j] = dpre * r[j];
    g[h + j] = drec[h + j] = dpre * rh[j] * r[j] * (1.0f - r[j]);
    g[j] = drec[j] = dz * z[j] * (1.0f - z[j]);
    dh[j] *= z[j];
  }
}

void simple_step_back(const Dims& d, const float* ws, std::int64_t i, std::int64_t k, float* dh, float*, float* g,
                      float*) {
  const float* out = plane(ws, d, 0, i, k);
  for (std::int64_t j = 0; j < d.units; ++j)
    g[j] = d.cell == RecurrentCell::kSimpleTanh ? dh[j] * (1.0f - out[j] * out[j]) : (out[j] > 0.0f ? dh[j] : 0.0f);
}

void recurrence_grad_cpu(KernelContext& ctx) {
  const float* dws = ctx.input(0).data<float>();
  const Tensor& workspace = ctx.input(1);
  const float* u = ctx.input(2).data<float>();
  const float* mask = optional_floats(ctx, 3);
  const Dims d = dims_of(ctx, workspace.shape());
  const float* ws = workspace.data<float>();
  float* dxp = ctx.output().mutable_data<float>();
  const bool gru = d.cell == RecurrentCell::kGru;
  auto step = d.cell == RecurrentCell::kLstm ? lstm_step_back : gru ? gru_step_back : simple_step_back;
  // U^T [G H, H], once: small_product would transpose U for every step of every block (5% of
  // bench_workloads lstm_text_b64's step). The calling thread's buffer, reached through a pointer.
  float* ut = thread_scratch(d.columns * d.units, RecurrentScratch::kTransposed);
  for (std::int64_t r = 0; r < d.units; ++r)
    for (std::int64_t c = 0; c < d.columns; ++c) ut[c * d.units + r] = u[r * d.columns + c];
  thread_local PackedPanels packed;
  packed.pack(d.columns, d.units, ut, d.units, std::min(kRowBlock, d.batch));
  const PackedPanels& packed_ut = packed;
  const RecurrentDropMask drop(ctx);
  for_each_row_block(ctx, d.batch, [&](std::int64_t first, std::int64_t end) {
    const std::int64_t rows = end - first, h = d.units;
    float* m = drop.active() ? thread_scratch(rows * h, RecurrentScratch::kDropMask) : nullptr;
    if (m != nullptr) drop.fill(m, first, rows, h);
    float* dh = thread_scratch(rows * h, RecurrentScratch::kCarry);
    float* dc = thread_scratch(rows * h, RecurrentScratch::kCellCarry);
    float* drec = thread_scratch(rows * d.columns, RecurrentScratch::kGates);
    float* product = thread_scratch(rows * h, RecurrentScratch::kProduct);
    bool padding[kRowBlock] = {};
    std::fill(dh, dh + rows * h, 0.0f);
    std::fill(dc, dc + rows * h, 0.0f);
    for (std::int64_t k = d.steps - 1; k >= 0; --k) {
      const std::int64_t t = d.time(k);
      bool any_padding = false;
      for (std::int64_t r = 0; r < rows; ++r) {
        const float* dy = plane(dws, d, 0, first + r, k);
        float* dhr = dh + r * h;
        for (std::int64_t j = 0; j < h; ++j) dhr[j] += dy[j];
        float* g = dxp + ((first + r) * d.steps + t) * d.columns;
        padding[r] = mask != nullptr && mask[(first + r) * d.steps + t] == 0.0f;
        if (padding[r]) {
          // The states carried over: their gradients go on to the step before, the inputs get none.
          std::fill(g, g + d.columns, 0.0f);
          std::fill(drec + r * d.columns, drec + (r + 1) * d.columns, 0.0f);
          any_padding = true;
          continue;
        }
        step(d, ws, first + r, k, dhr, dc + r * h, g, drec + r * d.columns);
      }
      if (k == 0) break;
      // d h_{t-1} = (the gradient of h_{t-1} U) U^T, plus the GRU's z dh.
      if (gru)
        product_in_place(rows, drec, d.columns, packed_ut, product, h);
      else
        product_in_place(rows, dxp + (first * d.steps + t) * d.columns, d.steps * d.columns, packed_ut, product, h);
      if (m != nullptr)
        for (std::int64_t e = 0; e < rows * h; ++e) product[e] *= m[e];
      if (!any_padding) {
        for (std::int64_t e = 0; e < rows * h; ++e) dh[e] = gru ? dh[e] + product[e] : product[e];
        continue;
      }
      for (std::int64_t r = 0; r < rows; ++r) {
        if (padding[r]) continue;
        for (std::int64_t e = r * h; e < (r + 1) * h; ++e) dh[e] = gru ? dh[e] + product[e] : product[e];
      }
    }
  });
}

// Example i's gradient of h_{t-1} U + b_r for its steps k in [k0, steps), in the order the cell ran them, as
// rows of G H: d xp's rows, with the GRU's candidate columns scaled by its reset gate. Points into d xp when
// that is already the layout (a forward LSTM or SimpleRNN), else fills `buffer`.
const float* recurrent_rows(const Dims& d, const float* dxp, const float* ws, std::int64_t i, std::int64_t k0,
                            float* buffer) {
  if (d.cell != RecurrentCell::kGru && !d.backwards) return dxp + (i * d.steps + k0) * d.columns;
  for (std::int64_t k = k0; k < d.steps; ++k) {
    float* out = buffer + (k - k0) * d.columns;
    std::copy_n(dxp + (i * d.steps + d.time(k)) * d.columns, d.columns, out);
    if (d.cell != RecurrentCell::kGru) continue;
    const float* r = plane(ws, d, 2, i, k);
    for (std::int64_t j = 0; j < d.units; ++j) out[2 * d.units + j] *= r[j];
  }
  return buffer;
}

// wrt 0: dU = the sum over examples and steps k >= 1 of h_{k-1}^T times step k's recurrent gradient, one
// product per example over its steps. wrt 1: the bias's, the column sums of d xp (and for the GRU's
// recurrent bias, of the recurrent gradient). Each block of kRowBlock examples sums its own part in example
// order on one thread, and the parts are added in block order: the same bits on any thread count.
void recurrence_param_grad_cpu(KernelContext& ctx) {
  const float* dxp = ctx.input(0).data<float>();
  const Tensor& workspace = ctx.input(1);
  const Dims d = dims_of(ctx, workspace.shape());
  const float* ws = workspace.data<float>();
  Tensor& out = ctx.output();
  float* po = out.mutable_data<float>();
  const std::int64_t size = out.num_elements(), blocks = (d.batch + kRowBlock - 1) / kRowBlock;
  const bool kernel = ctx.attrs().i("wrt") == 0, gru = d.cell == RecurrentCell::kGru;
  const RecurrentDropMask drop(ctx);
  // The calling thread's buffer, reached through a pointer: a pool thread naming it would get its own.
  float* parts = thread_scratch(blocks * size, RecurrentScratch::kParts);
  std::fill(parts, parts + blocks * size, 0.0f);
  for_each_row_block(ctx, d.batch, [&](std::int64_t first, std::int64_t end) {
    float* part = parts + first / kRowBlock * size;
    float* buffer = thread_scratch(d.steps * d.columns, RecurrentScratch::kColumns);
    // With recurrent_dropout, (h m)^T dG = diag(m) h^T dG: the example's product, its rows scaled by m.
    float* m = drop.active() && kernel ? thread_scratch(d.units, RecurrentScratch::kDropMask) : nullptr;
    float* product = kernel ? thread_scratch(size, RecurrentScratch::kParamProduct) : nullptr;
    for (std::int64_t i = first; i < end; ++i) {
      if (kernel) {
        if (d.steps < 2) continue;
        const float* rows = recurrent_rows(d, dxp, ws, i, 1, buffer);
        // In place where small_product takes it: sgemm's kernels of 8 floats ran this product (128 x 512,
        // depth 199) at 89 GFLOP/s on Zen 5, the 16-float in-place ones at 144 (bench_workloads
        // lstm_text_b64: 655-658 -> 793-845 samples/s, bench/README.md "Recurrent kernel gradient in place").
        product_in_place(true, false, d.units, d.columns, d.steps - 1, plane(ws, d, 0, i, 0), d.units, rows, d.columns,
                         product, d.columns);
        if (m != nullptr) drop.fill(m, i, 1, d.units);
        for (std::int64_t r = 0; r < d.units; ++r) {
          const float scale = m != nullptr ? m[r] : 1.0f;
          for (std::int64_t c = 0; c < d.columns; ++c) part[r * d.columns + c] += scale * product[r * d.columns + c];
        }
        continue;
      }
      for (std::int64_t k = 0; k < d.steps; ++k) {
        const float* g = dxp + (i * d.steps + k) * d.columns;
        for (std::int64_t c = 0; c < d.columns; ++c) part[c] += g[c];
      }
      if (!gru) continue;
      const float* rows = recurrent_rows(d, dxp, ws, i, 0, buffer);
      for (std::int64_t k = 0; k < d.steps; ++k)
        for (std::int64_t c = 0; c < d.columns; ++c) part[d.columns + c] += rows[k * d.columns + c];
    }
  });
  std::copy_n(parts, size, po);
  for (std::int64_t b = 1; b < blocks; ++b)
    for (std::int64_t e = 0; e < size; ++e) po[e] += parts[b * size + e];
}

// Where RecurrenceOutput's output p of a sequence comes from: the cell's step k, and whether that step read
// padding (the mask, by input step, is 0 there).
struct OutputStep {
  std::int64_t k;
  bool padding;
};
OutputStep output_step(const KernelContext& ctx, const float* mask, std::int64_t i, std::int64_t steps,
                       std::int64_t p) {
  const std::int64_t k = ctx.attrs().i_or("reverse", 0) != 0 ? steps - 1 - p : p;
  const std::int64_t t = ctx.attrs().i_or("go_backwards", 0) != 0 ? steps - 1 - k : k;
  return {k, mask != nullptr && mask[i * steps + t] == 0.0f};
}

// Whether the last step the cell ran for example i read padding: the output without return_sequences is
// then zeros under zero_output_for_mask, as Keras 3 takes the last of its masked outputs.
bool last_step_padding(const KernelContext& ctx, const float* mask, std::int64_t i, std::int64_t steps) {
  const std::int64_t t = ctx.attrs().i_or("go_backwards", 0) != 0 ? 0 : steps - 1;
  return mask != nullptr && mask[i * steps + t] == 0.0f;
}

// With a mask the outputs at padding steps are zeros (Keras' zero_output_for_mask).
void recurrence_output_cpu(KernelContext& ctx) {
  const Tensor& workspace = ctx.input(0);
  const float* mask = optional_floats(ctx, 1);
  const Shape& s = workspace.shape();
  const std::int64_t batch = s[1], steps = s[2], units = s[3];
  const float* ws = workspace.data<float>();
  float* y = ctx.output().mutable_data<float>();
  const bool sequences = ctx.attrs().i("return_sequences") != 0;
  for_each_element(ctx, batch, [&](std::int64_t i) {
    const float* h = ws + i * steps * units;
    if (!sequences) {
      if (last_step_padding(ctx, mask, i, steps))
        std::fill_n(y + i * units, units, 0.0f);
      else
        std::copy_n(h + (steps - 1) * units, units, y + i * units);
      return;
    }
    for (std::int64_t p = 0; p < steps; ++p) {
      const OutputStep from = output_step(ctx, mask, i, steps, p);
      float* out = y + (i * steps + p) * units;
      if (from.padding)
        std::fill(out, out + units, 0.0f);
      else
        std::copy_n(h + from.k * units, units, out);
    }
  });
}

void recurrence_output_grad_cpu(KernelContext& ctx) {
  const float* dy = ctx.input(0).data<float>();
  const float* mask = optional_floats(ctx, 2);
  const Shape& s = ctx.input(1).shape();
  const std::int64_t batch = s[1], steps = s[2], units = s[3];
  Tensor& out = ctx.output();
  float* g = out.mutable_data<float>();
  std::fill(g, g + out.num_elements(), 0.0f);
  const bool sequences = ctx.attrs().i("return_sequences") != 0;
  for_each_element(ctx, batch, [&](std::int64_t i) {
    float* h = g + i * steps * units;
    if (!sequences) {
      if (!last_step_padding(ctx, mask, i, steps)) std::copy_n(dy + i * units, units, h + (steps - 1) * units);
      return;
    }
    for (std::int64_t p = 0; p < steps; ++p) {
      const OutputStep from = output_step(ctx, mask, i, steps, p);
      if (!from.padding) std::copy_n(dy + (i * steps + p) * units, units, h + from.k * units);
    }
  });
}

}  // namespace

TCTL_REGISTER_KERNELS("cpu", {"Recurrence", recurrence_cpu}, {"RecurrenceGrad", recurrence_grad_cpu},
                      {"RecurrenceParamGrad", recurrence_param_grad_cpu}, {"RecurrenceOutput", recurrence_output_cpu},
                      {"RecurrenceOutputGrad", recurrence_output_grad_cpu});

}  // namespace tctl::cpu
