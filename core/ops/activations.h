// The activation functions by their Keras names ("relu", "softmax", ...): what layers and the Keras
// importer accept, each computed by an op of core/ops/activations.cpp ("linear" by none).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tctl {

// "elu", "gelu", "leaky_relu", "linear", "relu", "sigmoid", "softmax", "tanh" (sorted).
const std::vector<std::string>& activation_names();
// Whether a fused op (FusedMatMul, FusedConv2D) applies it itself: "relu" and "linear".
bool fusable_activation(std::string_view name);

}  // namespace tctl
