// Helpers shared by the CPU kernel files: shape functions and an elementwise loop split over the intra-op pool.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/autodiff.h"
#include "core/errors.h"
#include "core/kernel_context.h"
#include "core/op_registry.h"

namespace tctl::cpu {

// Elements per intra-op block for cheap elementwise work: below this, splitting costs more than it saves.
inline constexpr std::int64_t kElementwiseGrain = 16384;

// Shape function: inputs 0..n-1 must all have input 0's dtype and shape; the output has them too.
InferFn same_shape_inputs();

// Applies fn(i) for every element index of the output, split across the intra-op pool.
template <class Fn>
void for_each_element(const KernelContext& ctx, std::int64_t n, Fn fn) {
  ctx.parallel_for(n, kElementwiseGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) fn(i);
  });
}

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

// The fused ops (FusedMatMul, FusedConv2D) end in an "activation" attribute of "relu" or "linear".
// Whether it is ReLU; any other value is an internal error.
bool fused_relu(const Attrs& attrs);

// y[r, j] = activation(y[r, j] + bias[j]) for a block of `rows` x `cols` outputs with row stride `ld`: the
// same arithmetic as BiasAdd and Relu apart, so the fused ops give their bits.
void add_bias_activation(float* y, std::int64_t ld, std::int64_t rows, std::int64_t cols, const float* bias, bool relu);

// The shape function of a fused op: `product`'s on inputs 0 and 1, then input 2 must be a float bias with
// one value per element of the output's last dimension; `what` names the output in messages.
InferFn fused_infer(InferFn product, std::string what);

// The gradients of a fused op: `product_grads(dz)` gives those of inputs 0 and 1 for the gradient dz at the
// pre-activation (dy, or dy through ReLU, which reads the output: y > 0 exactly where the pre-activation
// is), and the bias's gradient follows.
template <class ProductGrads>
std::vector<Output> fused_grads(GradBuilder& g, ProductGrads product_grads) {
  const Output dz = fused_relu(g.attrs()) ? g.op("ReluGrad", {g.dy(), g.y()}) : g.dy();
  std::vector<Output> grads = product_grads(dz);
  grads.push_back(g.op("BiasAddGrad", {dz}));
  return grads;
}

}  // namespace tctl::cpu
