// Activation functions by their Keras names, shared by Dense and Activation layers.
#pragma once

#include <string>
#include <vector>

#include "core/graph.h"

namespace tctl {

// "elu", "gelu", "leaky_relu", "linear", "relu", "sigmoid", "softmax", "tanh" (sorted).
const std::vector<std::string>& activation_names();
// Adds the activation's op after x; "linear" returns x unchanged.
Output apply_activation(Graph& g, Output x, const std::string& name);
// Whether a layer's fused product and bias (FusedMatMul, FusedConv2D) can end in this activation: "relu"
// and "linear"; the others follow as an op of their own.
bool fuses_with_bias(const std::string& name);

}  // namespace tctl
