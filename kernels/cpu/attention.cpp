// CPU kernels of SelfAttention and its gradient (definitions in core/ops/attention.cpp). Every (example, head)
// pair is independent and runs on one thread, its products in place (product_in_place), so any thread count
// gives the same bits. The gradient recomputes the softmax rather than keeping N heads T T of it.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/dropout_mask.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/small_product.h"
#include "kernels/cpu/vector_math.h"

namespace tctl::cpu {
namespace {

enum class AttentionScratch { kScores, kGradScores, kDropped, kCount };

// Keras' additive mask: a large negative number, not -infinity, so a query whose keys are all excluded
// attends to them all evenly, as in Keras.
constexpr float kExcluded = -1e9f;

struct Heads {
  std::int64_t batch, steps, width, heads, head;  // width D = heads x head
  bool causal;
  const float* mask;  // [N, T] or nullptr
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(head)); }
};

Heads heads_of(const KernelContext& ctx, const Shape& qkv, const float* mask) {
  const std::int64_t heads = ctx.attrs().i("heads"), width = qkv[2] / 3;
  return {qkv[0], qkv[1], width, heads, width / heads, ctx.attrs().i_or("causal", 0) != 0, mask};
}

// Dropout on the attention's weights in training (attributes dropout, stream), as Keras' MultiHeadAttention
// drops them: weight (i, j) of example n and head h is element ((n h) T + i) T + j of the stream, counted
// from the first example of the whole batch, so the gradient (and data-parallel replicas) draw the same.
struct WeightDropout {
  float rate = 0.0f;
  std::uint64_t key = 0;
  std::int64_t offset = 0;
  explicit WeightDropout(const KernelContext& ctx)
      : rate(static_cast<float>(ctx.attrs().f_or("dropout", 0.0))),
        key(rate > 0.0f ? ctx.random_key(ctx.attrs().i("stream")) : 0),
        offset(ctx.batch_offset()) {}
  bool active() const { return rate > 0.0f; }
  // Row i of pair e = n heads + h, from `in` into `out` (which may be `in`).
  void apply(const Heads& a, std::int64_t e, std::int64_t i, const float* in, float* out) const {
    const auto first = static_cast<std::uint64_t>(((offset * a.heads + e) * a.steps + i) * a.steps);
    mask_block(in, out, 0, a.steps, key, first, rate, 1.0f / (1.0f - rate));
  }
};

// Whether the pair (query i, key j) is excluded; m is the example's mask row or nullptr.
bool excluded_pair(const Heads& a, const float* m, std::int64_t i, std::int64_t j) {
  return (a.causal && j > i) || (m != nullptr && (m[i] == 0.0f || m[j] == 0.0f));
}

// softmax of a row of raw scores s in place, as softmax(s * scale): scaled and its maximum found in one
// pass, then exponentials shifted by it through vector_exp (kernels/cpu/vector_math.h), then normalized; T T
// exponentials per example and head, twice a training step (bench_workloads transformer_text_b32). The
// excluded pairs of a row (causal, padding) get kExcluded added after the scaling.
void attention_softmax(const Heads& a, const float* m, std::int64_t i, float* row) {
  const std::int64_t n = a.steps;
  const float scale = a.scale();
  apply_vector(row, n, [scale](Floats v) { return v * splat(scale); });
  if (a.causal || m != nullptr)
    for (std::int64_t j = 0; j < n; ++j)
      if (excluded_pair(a, m, i, j)) row[j] += kExcluded;
  const float mx = row_max(row, n);
  apply_vector(row, n, [mx](Floats v) { return vector_exp(v - splat(mx)); });
  const float inv = 1.0f / row_sum(row, n);
  apply_vector(row, n, [inv](Floats v) { return v * splat(inv); });
}

// P = softmax(Q K^T / sqrt(d) + A) for example n and head h, [T, T] into p.
void attention_scores(const Heads& a, const float* qkv, std::int64_t n, std::int64_t h, float* p) {
  const std::int64_t t = a.steps, ld = 3 * a.width;
  const float* q = qkv + n * t * ld + h * a.head;
  product_in_place(false, true, t, t, a.head, q, ld, q + a.width, ld, p, t);
  const float* m = a.mask != nullptr ? a.mask + n * t : nullptr;
  for (std::int64_t i = 0; i < t; ++i) attention_softmax(a, m, i, p + i * t);
}

void self_attention_cpu(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Heads a = heads_of(ctx, x.shape(), optional_floats(ctx, 1));
  const float* qkv = x.data<float>();
  float* y = ctx.output().mutable_data<float>();
  const std::int64_t t = a.steps, ld = 3 * a.width;
  const WeightDropout drop(ctx);
  ctx.parallel_for(a.batch * a.heads, 1, [&](std::int64_t begin, std::int64_t end) {
    float* p = thread_scratch(t * t, AttentionScratch::kScores);
    for (std::int64_t e = begin; e < end; ++e) {
      const std::int64_t n = e / a.heads, h = e % a.heads;
      attention_scores(a, qkv, n, h, p);
      if (drop.active())
        for (std::int64_t i = 0; i < t; ++i) drop.apply(a, e, i, p + i * t, p + i * t);
      const float* v = qkv + n * t * ld + 2 * a.width + h * a.head;
      product_in_place(false, false, t, a.head, t, p, t, v, ld, y + n * t * a.width + h * a.head, a.width);
    }
  });
}

// With P the softmax and dO the output's gradient: dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dP P)) /
// sqrt(d), dQ = dS K, dK = dS^T Q. With dropout on the weights, P' = P M: dV = P'^T dO, and dP = (dO V^T) M.
void self_attention_grad_cpu(KernelContext& ctx) {
  const float* dy = ctx.input(0).data<float>();
  const Tensor& x = ctx.input(1);
  const Heads a = heads_of(ctx, x.shape(), optional_floats(ctx, 2));
  const float* qkv = x.data<float>();
  float* dqkv = ctx.output().mutable_data<float>();
  const std::int64_t t = a.steps, ld = 3 * a.width;
  const WeightDropout drop(ctx);
  ctx.parallel_for(a.batch * a.heads, 1, [&](std::int64_t begin, std::int64_t end) {
    float* p = thread_scratch(t * t, AttentionScratch::kScores);
    float* dp = thread_scratch(t * t, AttentionScratch::kGradScores);
    float* dropped = drop.active() ? thread_scratch(t * t, AttentionScratch::kDropped) : nullptr;
    for (std::int64_t e = begin; e < end; ++e) {
      const std::int64_t n = e / a.heads, h = e % a.heads;
      attention_scores(a, qkv, n, h, p);
      const float* q = qkv + n * t * ld + h * a.head;
      const float* k = q + a.width;
      const float* v = q + 2 * a.width;
      const float* dout = dy + n * t * a.width + h * a.head;
      float* dq = dqkv + n * t * ld + h * a.head;
      if (dropped != nullptr)
        for (std::int64_t i = 0; i < t; ++i) drop.apply(a, e, i, p + i * t, dropped + i * t);
      product_in_place(true, false, t, a.head, t, dropped != nullptr ? dropped : p, t, dout, a.width, dq + 2 * a.width,
                       ld);                                                      // dV
      product_in_place(false, true, t, t, a.head, dout, a.width, v, ld, dp, t);  // dP
      if (dropped != nullptr)
        for (std::int64_t i = 0; i < t; ++i) drop.apply(a, e, i, dp + i * t, dp + i * t);
      const float scale = a.scale();
      const float* m = a.mask != nullptr ? a.mask + n * t : nullptr;
      for (std::int64_t i = 0; i < t; ++i) {
        float* row = dp + i * t;
        const float* pr = p + i * t;
        const float d = row_dot(row, pr, t);
        std::int64_t j = 0;
        for (; j + kLanes <= t; j += kLanes) store(row + j, load(pr + j) * (load(row + j) - splat(d)) * splat(scale));
        for (; j < t; ++j) row[j] = pr[j] * (row[j] - d) * scale;
        // An excluded pair's score is swamped by the -1e9 in float: it moves nothing, so it gets no gradient
        // (a query whose keys are all excluded attends evenly whatever its scores).
        if (a.causal || m != nullptr)
          for (j = 0; j < t; ++j)
            if (excluded_pair(a, m, i, j)) row[j] = 0.0f;
      }
      product_in_place(false, false, t, a.head, t, dp, t, k, ld, dq, ld);           // dQ
      product_in_place(true, false, t, a.head, t, dp, t, q, ld, dq + a.width, ld);  // dK
    }
  });
}

}  // namespace

TCTL_REGISTER_KERNELS("cpu", {"SelfAttention", self_attention_cpu}, {"SelfAttentionGrad", self_attention_grad_cpu});

}  // namespace tctl::cpu
