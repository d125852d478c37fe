// Activation functions by their Keras names, shared by Dense and Activation layers.
#pragma once

#include <string>
#include <vector>

#include "core/graph.h"
#include "core/ops/activations.h"

namespace tctl {

// Adds the activation's op after x; "linear" returns x unchanged.
Output apply_activation(Graph& g, Output x, const std::string& name);
// A layer's product and bias as one fused node (`op`: FusedMatMul or FusedConv2D, on `inputs` x, kernel,
// bias), ending in the activation where the fused op can apply it ("relu", "linear"); any other activation
// follows as an op of its own.
Output add_fused_with_bias(Graph& g, std::string_view op, std::vector<Output> inputs, Attrs attrs,
                           const std::string& activation);

}  // namespace tctl
