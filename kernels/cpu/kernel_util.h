// Helpers shared by the CPU kernel files: vectors of the target's width, an elementwise loop split over the
// intra-op pool, softmax rows and the fused ops' bias and activation.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/errors.h"
#include "core/kernel_context.h"

namespace tctl::cpu {

// Elements per intra-op block for cheap elementwise work: below this, splitting costs more than it saves
// (waking the other thread and fetching its half of the data: a ReluGrad of 32K floats, the digits MLP's at
// batch 256, runs slower cut in two than on one thread; `tensorctl profile configs/digits_mlp.json
// --batch-size 256 --ops --intra-op-threads 1,2`, figures in bench/README.md).
inline constexpr std::int64_t kElementwiseGrain = 65536;

// A vector of floats as wide as the target's registers (GCC's vector extensions; a wider type than the
// target has is split through the stack, several times slower), with unaligned loads and stores.
#if defined(__AVX512F__)
inline constexpr int kLanes = 16;
#elif defined(__AVX__)
inline constexpr int kLanes = 8;
#else
inline constexpr int kLanes = 4;
#endif
using Floats = float __attribute__((vector_size(kLanes * sizeof(float))));
inline Floats load(const float* p) {
  Floats v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, Floats v) { std::memcpy(p, &v, sizeof v); }

// This thread's buffer `which` of at least `floats` floats, grown as needed and kept: no allocation per
// step. Each enum type Slot (one per kernel file) has its own buffers, so two files never share one; a
// kernel may hold several slots of its type at once, and lend the calling thread's to its helpers.
template <class Slot>
float* thread_scratch(std::int64_t floats, Slot which) {
  thread_local std::vector<float> buffers[static_cast<int>(Slot::kCount)];
  auto& b = buffers[static_cast<int>(which)];
  if (b.size() < static_cast<std::size_t>(floats)) b.resize(static_cast<std::size_t>(floats));
  return b.data();
}

// The floats of input i of a node whose inputs from i on are optional (a padding mask), or nullptr when the
// node has no input i.
inline const float* optional_floats(const KernelContext& ctx, int i) {
  return ctx.num_inputs() > i ? ctx.input(i).data<float>() : nullptr;
}

// Applies fn(i) for every element index of the output, split across the intra-op pool.
template <class Fn>
void for_each_element(const KernelContext& ctx, std::int64_t n, Fn fn) {
  ctx.parallel_for(n, kElementwiseGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) fn(i);
  });
}

// fn(r) for each of `rows` rows of `work` floats, split over the intra-op pool in blocks of about
// kElementwiseGrain floats. Each row is computed by one thread, so any split gives the same bits.
template <class Fn>
void for_each_row_of(const KernelContext& ctx, std::int64_t rows, std::int64_t work, Fn fn) {
  ctx.parallel_for(rows, std::max<std::int64_t>(1, kElementwiseGrain / std::max<std::int64_t>(work, 1)),
                   [&](std::int64_t b, std::int64_t e) {
                     for (std::int64_t r = b; r < e; ++r) fn(r);
                   });
}

// Whether any of x[0, n) is a NaN or an infinity, the pass split across the intra-op pool in blocks of
// `grain`: an all-ones exponent is either, and the integer OR-reduction vectorises where a float test with an
// early exit would not. The optimizers' numeric guard and loss scaling's AllFinite.
bool any_non_finite(const KernelContext& ctx, const float* x, std::int64_t n, std::int64_t grain);

// The row of an embedding's table of `rows` rows that id, element i of the node's ids, names; an id that is
// not a whole number in [0, rows) is refused with its place, as Keras refuses it (a CSV feature that is no
// token id).
std::int64_t table_row(const KernelContext& ctx, float id, std::int64_t i, std::int64_t rows);

// Softmax of one row of c logits into p, shifted by the row maximum so exp never overflows. Returns the
// row's logsumexp, which the cross-entropy kernels need.
inline float softmax_row(const float* x, std::int64_t c, float* p) {
  float mx = x[0];
  for (std::int64_t j = 1; j < c; ++j) mx = std::max(mx, x[j]);
  float sum = 0.0f;
  for (std::int64_t j = 0; j < c; ++j) sum += (p[j] = std::exp(x[j] - mx));
  const float inv = 1.0f / sum;
  for (std::int64_t j = 0; j < c; ++j) p[j] *= inv;
  return std::log(sum) + mx;
}

// y[r, j] = activation(y[r, j] + bias[j]) for a block of `rows` x `cols` outputs with row stride `ld`: the
// same arithmetic as BiasAdd and Relu apart, so the fused ops give their bits.
void add_bias_activation(float* y, std::int64_t ld, std::int64_t rows, std::int64_t cols, const float* bias, bool relu);

}  // namespace tctl::cpu
