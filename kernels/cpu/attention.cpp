// CPU kernels of SelfAttention and its gradient (definitions in core/ops/attention.cpp). Every (example, head)
// pair is independent and runs on one thread, its products in place (product_in_place), so any thread count
// gives the same bits. The gradient recomputes the softmax rather than keeping N heads T T of it.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/small_product.h"
#include "kernels/cpu/vector_math.h"

namespace tctl::cpu {
namespace {

enum class AttentionScratch { kScores, kGradScores, kCount };

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

// Whether the pair (query i, key j) is excluded; m is the example's mask row or nullptr.
bool excluded_pair(const Heads& a, const float* m, std::int64_t i, std::int64_t j) {
  return (a.causal && j > i) || (m != nullptr && (m[i] == 0.0f || m[j] == 0.0f));
}

// softmax of a row in place, shifted by its maximum, through vector_exp (kernels/cpu/vector_math.h): T T
// exponentials per example and head, twice a training step (bench_workloads transformer_text_b32).
void attention_softmax(float* row, std::int64_t n) {
  float mx = row[0];
  for (std::int64_t j = 1; j < n; ++j) mx = std::max(mx, row[j]);
  apply_vector(row, n, [mx](Floats v) { return vector_exp(v - splat(mx)); });
  float sum = 0.0f;
  for (std::int64_t j = 0; j < n; ++j) sum += row[j];
  const float inv = 1.0f / sum;
  for (std::int64_t j = 0; j < n; ++j) row[j] *= inv;
}

// P = softmax(Q K^T / sqrt(d) + A) for example n and head h, [T, T] into p.
void attention_scores(const Heads& a, const float* qkv, std::int64_t n, std::int64_t h, float* p) {
  const std::int64_t t = a.steps, ld = 3 * a.width;
  const float* q = qkv + n * t * ld + h * a.head;
  product_in_place(false, true, t, t, a.head, q, ld, q + a.width, ld, p, t);
  const float scale = a.scale();
  const float* m = a.mask != nullptr ? a.mask + n * t : nullptr;
  for (std::int64_t i = 0; i < t; ++i) {
    float* row = p + i * t;
    for (std::int64_t j = 0; j < t; ++j) row[j] = row[j] * scale + (excluded_pair(a, m, i, j) ? kExcluded : 0.0f);
    attention_softmax(row, t);
  }
}

void self_attention_cpu(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Heads a = heads_of(ctx, x.shape(), optional_floats(ctx, 1));
  const float* qkv = x.data<float>();
  float* y = ctx.output().mutable_data<float>();
  const std::int64_t t = a.steps, ld = 3 * a.width;
  ctx.parallel_for(a.batch * a.heads, 1, [&](std::int64_t begin, std::int64_t end) {
    float* p = thread_scratch(t * t, AttentionScratch::kScores);
    for (std::int64_t e = begin; e < end; ++e) {
      const std::int64_t n = e / a.heads, h = e % a.heads;
      attention_scores(a, qkv, n, h, p);
      const float* v = qkv + n * t * ld + 2 * a.width + h * a.head;
      product_in_place(false, false, t, a.head, t, p, t, v, ld, y + n * t * a.width + h * a.head, a.width);
    }
  });
}

// With P the softmax and dO the output's gradient: dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dP P)) /
// sqrt(d), dQ = dS K, dK = dS^T Q.
void self_attention_grad_cpu(KernelContext& ctx) {
  const float* dy = ctx.input(0).data<float>();
  const Tensor& x = ctx.input(1);
  const Heads a = heads_of(ctx, x.shape(), optional_floats(ctx, 2));
  const float* qkv = x.data<float>();
  float* dqkv = ctx.output().mutable_data<float>();
  const std::int64_t t = a.steps, ld = 3 * a.width;
  ctx.parallel_for(a.batch * a.heads, 1, [&](std::int64_t begin, std::int64_t end) {
    float* p = thread_scratch(t * t, AttentionScratch::kScores);
    float* dp = thread_scratch(t * t, AttentionScratch::kGradScores);
    for (std::int64_t e = begin; e < end; ++e) {
      const std::int64_t n = e / a.heads, h = e % a.heads;
      attention_scores(a, qkv, n, h, p);
      const float* q = qkv + n * t * ld + h * a.head;
      const float* k = q + a.width;
      const float* v = q + 2 * a.width;
      const float* dout = dy + n * t * a.width + h * a.head;
      float* dq = dqkv + n * t * ld + h * a.head;
      product_in_place(true, false, t, a.head, t, p, t, dout, a.width, dq + 2 * a.width, ld);  // dV
      product_in_place(false, true, t, t, a.head, dout, a.width, v, ld, dp, t);                // dP
      const float scale = a.scale();
      for (std::int64_t i = 0; i < t; ++i) {
        float* row = dp + i * t;
        const float* pr = p + i * t;
        double dot = 0.0;
        for (std::int64_t j = 0; j < t; ++j) dot += static_cast<double>(row[j]) * pr[j];
        const float d = static_cast<float>(dot);
        // An excluded pair's score is swamped by the -1e9 in float: it moves nothing, so it gets no gradient
        // (a query whose keys are all excluded attends evenly whatever its scores).
        const float* m = a.mask != nullptr ? a.mask + n * t : nullptr;
        for (std::int64_t j = 0; j < t; ++j) row[j] = excluded_pair(a, m, i, j) ? 0.0f : pr[j] * (row[j] - d) * scale;
      }
      product_in_place(false, false, t, a.head, t, dp, t, k, ld, dq, ld);           // dQ
      product_in_place(true, false, t, a.head, t, dp, t, q, ld, dq + a.width, ld);  // dK
    }
  });
}

}  // namespace

TCTL_REGISTER_KERNELS("cpu", {"SelfAttention", self_attention_cpu}, {"SelfAttentionGrad", self_attention_grad_cpu});

}  // namespace tctl::cpu
