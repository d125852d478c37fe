// CUDA kernels of SelfAttention and its gradient (definitions in core/ops/attention.cpp, CPU kernels in
// kernels/cpu/attention.cpp). Each head's products are one strided batched cuBLAS call over the examples
// (Q K^T, P V; back: P'^T dO, dO V^T, dS K, dS^T Q), between them a warp per row of scores for the softmax,
// the exclusions, the dropout on the weights (the CPU's draws: uniform_at of the same element of the same
// stream) and the softmax's gradient. The scores of every example and head sit in one [N, heads, T, T]
// buffer of the device's pool. Written 2026-11-29 on a machine without a GPU: compiled for sm_90, not yet
// run (scripts/gpu-check.sh compares it with the CPU through kernels_tests on one).

#include <cmath>
#include <cstdint>

#include "core/counter_random.h"
#include "core/op_registry.h"
#include "kernels/cuda/device_math.cuh"

namespace tctl::cuda {
namespace {

// Keras' additive mask, as the CPU's: a large negative number, so a query whose keys are all excluded
// attends to them all evenly.
constexpr float kExcluded = -1e9f;

struct Heads {
  std::int64_t batch, steps, width, heads, head;  // width D = heads x head
  bool causal;
  const float* mask;  // [N, T] or nullptr
  float rate;         // dropout on the weights, 0 for none
  StepKey key;
  std::int64_t offset;  // the run's first example in the whole batch
};

Heads heads_of(const KernelContext& ctx, const Shape& qkv, int mask_input) {
  const std::int64_t heads = ctx.attrs().i("heads"), width = qkv[2] / 3;
  const float rate = static_cast<float>(ctx.attrs().f_or("dropout", 0.0));
  return {qkv[0],
          qkv[1],
          width,
          heads,
          width / heads,
          ctx.attrs().i_or("causal", 0) != 0,
          optional_in<float>(ctx, mask_input),
          rate,
          rate > 0.0f ? step_random_key(ctx, ctx.attrs().i("stream")) : StepKey{},
          ctx.batch_offset()};
}

__device__ bool excluded_pair(const Heads& a, std::int64_t n, std::int64_t i, std::int64_t j) {
  return (a.causal && j > i) ||
         (a.mask != nullptr && (a.mask[n * a.steps + i] == 0.0f || a.mask[n * a.steps + j] == 0.0f));
}

// The dropout factor of weight (i, j) of row r = (n heads + h) T + i: 0, or 1 / (1 - rate).
__device__ float kept(const Heads& a, std::int64_t r, std::int64_t j) {
  const auto index = static_cast<std::uint64_t>((a.offset * a.heads * a.steps + r) * a.steps + j);
  return uniform_at(a.key.get(), index) < a.rate ? 0.0f : 1.0f / (1.0f - a.rate);
}

// Rows of scores [N heads T, T] in place: softmax(s / sqrt(d) + exclusions); with dropout, the dropped
// weights into `dropped` (which may be the scores themselves).
__global__ void softmax_rows(float* scores, float* dropped, Heads a) {
  const float scale = 1.0f / sqrtf(static_cast<float>(a.head));
  const std::int64_t t = a.steps;
  TCTL_WARP_ROW_LOOP(r, a.batch * a.heads * t) {
    const std::int64_t n = r / (a.heads * t), i = r % t;
    float* s = scores + r * t;
    float mx = -INFINITY;
    for (std::int64_t j = lane_id(); j < t; j += kWarp) {
      s[j] = s[j] * scale + (excluded_pair(a, n, i, j) ? kExcluded : 0.0f);
      mx = fmaxf(mx, s[j]);
    }
    mx = warp_max(mx);
    float sum = 0.0f;
    for (std::int64_t j = lane_id(); j < t; j += kWarp) sum += (s[j] = expf(s[j] - mx));
    const float inv = 1.0f / warp_sum(sum);
    for (std::int64_t j = lane_id(); j < t; j += kWarp) {
      s[j] *= inv;
      if (a.rate > 0.0f) dropped[r * t + j] = s[j] * kept(a, r, j);
    }
  }
}

// dP (the gradient of the weights, dO V^T) into dS in place: with dropout dP M first; then
// P (dP - rowsum(dP P)) / sqrt(d), zeros at excluded pairs.
__global__ void softmax_grad_rows(const float* p, float* dp, Heads a) {
  const float scale = 1.0f / sqrtf(static_cast<float>(a.head));
  const std::int64_t t = a.steps;
  TCTL_WARP_ROW_LOOP(r, a.batch * a.heads * t) {
    const std::int64_t n = r / (a.heads * t), i = r % t;
    const float* pr = p + r * t;
    float* g = dp + r * t;
    float dot = 0.0f;
    for (std::int64_t j = lane_id(); j < t; j += kWarp) {
      if (a.rate > 0.0f) g[j] *= kept(a, r, j);
      dot += g[j] * pr[j];
    }
    dot = warp_sum(dot);
    for (std::int64_t j = lane_id(); j < t; j += kWarp)
      g[j] = excluded_pair(a, n, i, j) ? 0.0f : pr[j] * (g[j] - dot) * scale;
  }
}

// y = op(A) op(B) for every example (row_major_gemm): A, B and y advance by their strides from one example to
// the next.
void batched_product(KernelContext& ctx, std::int64_t rows, std::int64_t cols, std::int64_t k, GemmOperand a,
                     GemmOperand b, float* y, std::int64_t ldy, std::int64_t stride_y, std::int64_t batch) {
  row_major_gemm(ctx, rows, cols, k, a, b, 0.0f, y, ldy, stride_y, batch);
}

// The weights of every example and head, [N, heads, T, T], from qkv: Q K^T per head, then softmax_rows.
void attention_weights(KernelContext& ctx, const Heads& a, const float* qkv, float* p, float* dropped) {
  const std::int64_t t = a.steps, ld = 3 * a.width;
  for (std::int64_t h = 0; h < a.heads; ++h)
    batched_product(ctx, t, t, a.head, GemmOperand{qkv + h * a.head, ld, false, t * ld},
                    GemmOperand{qkv + a.width + h * a.head, ld, true, t * ld}, p + h * t * t, t, a.heads * t * t,
                    a.batch);
  launch_rows(ctx, a.batch * a.heads * t, softmax_rows, p, dropped, a);
}

Tensor scratch(KernelContext& ctx, const Heads& a) {
  return Tensor::empty(DType::kF32, Shape{std::max<std::int64_t>(1, a.batch * a.heads * a.steps * a.steps)},
                       &ctx.device());
}

void self_attention_cuda(KernelContext& ctx) {
  const Heads a = heads_of(ctx, ctx.input(0).shape(), 1);
  if (a.batch * a.steps == 0) return;
  const Tensor scores = scratch(ctx, a);
  auto* p = static_cast<float*>(scores.raw_mutable_data());
  const float* qkv = in<float>(ctx, 0);
  float* y = out<float>(ctx);
  const std::int64_t t = a.steps, ld = 3 * a.width;
  attention_weights(ctx, a, qkv, p, p);
  for (std::int64_t h = 0; h < a.heads; ++h)
    batched_product(ctx, t, a.head, t, GemmOperand{p + h * t * t, t, false, a.heads * t * t},
                    GemmOperand{qkv + 2 * a.width + h * a.head, ld, false, t * ld}, y + h * a.head, a.width,
                    t * a.width, a.batch);
}

// Inputs (dy, qkv[, mask]). dV = P'^T dO, dP = dO V^T, dS from softmax_grad_rows, dQ = dS K, dK = dS^T Q.
void self_attention_grad_cuda(KernelContext& ctx) {
  const Heads a = heads_of(ctx, ctx.input(1).shape(), 2);
  if (a.batch * a.steps == 0) return;
  const Tensor scores = scratch(ctx, a), grads = scratch(ctx, a);
  const Tensor dropped_scores = a.rate > 0.0f ? scratch(ctx, a) : Tensor();
  auto* p = static_cast<float*>(scores.raw_mutable_data());
  auto* dp = static_cast<float*>(grads.raw_mutable_data());
  float* dropped = a.rate > 0.0f ? static_cast<float*>(dropped_scores.raw_mutable_data()) : p;
  const float* dy = in<float>(ctx, 0);
  const float* qkv = in<float>(ctx, 1);
  float* dqkv = out<float>(ctx);
  const std::int64_t t = a.steps, ld = 3 * a.width, sp = a.heads * t * t;
  attention_weights(ctx, a, qkv, p, dropped);
  for (std::int64_t h = 0; h < a.heads; ++h) {
    const GemmOperand d_out{dy + h * a.head, a.width, false, t * a.width};
    batched_product(ctx, t, a.head, t, GemmOperand{dropped + h * t * t, t, true, sp}, d_out,
                    dqkv + 2 * a.width + h * a.head, ld, t * ld, a.batch);  // dV
    batched_product(ctx, t, t, a.head, d_out, GemmOperand{qkv + 2 * a.width + h * a.head, ld, true, t * ld},
                    dp + h * t * t, t, sp, a.batch);  // dP
  }
  launch_rows(ctx, a.batch * a.heads * t, softmax_grad_rows, static_cast<const float*>(p), dp, a);
  for (std::int64_t h = 0; h < a.heads; ++h) {
    batched_product(ctx, t, a.head, t, GemmOperand{dp + h * t * t, t, false, sp},
                    GemmOperand{qkv + a.width + h * a.head, ld, false, t * ld}, dqkv + h * a.head, ld, t * ld,
                    a.batch);  // dQ
    batched_product(ctx, t, a.head, t, GemmOperand{dp + h * t * t, t, true, sp},
                    GemmOperand{qkv + h * a.head, ld, false, t * ld}, dqkv + a.width + h * a.head, ld, t * ld,
                    a.batch);  // dK
  }
}

}  // namespace

TCTL_REGISTER_KERNELS("cuda", {"SelfAttention", self_attention_cuda}, {"SelfAttentionGrad", self_attention_grad_cuda});

}  // namespace tctl::cuda
