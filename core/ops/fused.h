// The fused ops (FusedMatMul, FusedConv2D): a product, a bias and an activation in one node. What their
// shape functions, gradients and kernels share: the "activation" attribute, "relu" or "linear".
#pragma once

#include <string>
#include <vector>

#include "core/autodiff.h"
#include "core/op_registry.h"

namespace tctl {

// Whether a fused op's "activation" attribute is ReLU; any value but "relu" or "linear" is an internal error.
bool fused_relu(const Attrs& attrs);

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

}  // namespace tctl
