// Activation functions by their Keras names, shared by Dense and Activation layers.
#pragma once

#include <string>
#include <vector>

#include "core/graph.h"
#include "core/ops/activations.h"
#include "models/io/onnx_writer.h"

namespace tctl {

// What a node applies last, as a loss sees it: the activation's name ("" for none: linear, or an op that is no
// activation) and the op that applies it, for messages ("Relu" for a product fused with its ReLU too).
struct OutputActivation {
  std::string name;
  std::string op;
};
OutputActivation output_activation(const Node& n);
// Whether cross-entropy can read the activation's outputs as logits or probabilities: softmax, linear ("")
// and the unbounded leaky_relu, elu and gelu; not relu, sigmoid or tanh.
bool activation_gives_scores(const std::string& name);

// Adds the activation's op after x; "linear" returns x unchanged.
Output apply_activation(Graph& g, Output x, const std::string& name);
// A layer's product and bias as one fused node (`op`: FusedMatMul or FusedConv2D, on `inputs` x, kernel,
// bias), ending in the activation where the fused op can apply it ("relu", "linear"); any other activation
// follows as an op of its own.
Output add_fused_with_bias(Graph& g, std::string_view op, std::vector<Output> inputs, Attrs attrs,
                           const std::string& activation);
// The activation `name` applied to the ONNX value x as our kernels compute it ("linear" returns x), its nodes
// named after `layer`. Throws SpecError("model.json", layer, ...) for an activation ONNX has no form for.
std::string activation_to_onnx(OnnxWriter& w, const std::string& layer, const std::string& name, const std::string& x);

}  // namespace tctl
