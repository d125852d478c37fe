#include "models/nn/activations.h"

#include "core/errors.h"

namespace tctl {

Output apply_activation(Graph& g, Output x, const std::string& name) {
  if (name == "linear") return x;
  if (name == "relu") return g.add("Relu", {x});
  // Keras 3's defaults for the string forms: leaky_relu's negative_slope 0.2 (the LeakyReLU layer's is
  // 0.3), elu's alpha 1; gelu is the exact (erf) form.
  if (name == "leaky_relu") return g.add("LeakyRelu", {x}, Attrs{{"alpha", 0.2}});
  if (name == "elu") return g.add("Elu", {x}, Attrs{{"alpha", 1.0}});
  if (name == "gelu") return g.add("Gelu", {x});
  if (name == "sigmoid") return g.add("Sigmoid", {x});
  if (name == "tanh") return g.add("Tanh", {x});
  if (name == "softmax") return g.add("Softmax", {x});
  TCTL_CHECK(false, "activation not validated: " + name);
}

Output add_fused_with_bias(Graph& g, std::string_view op, std::vector<Output> inputs, Attrs attrs,
                           const std::string& activation) {
  const bool fuses = fusable_activation(activation);
  attrs.set("activation", fuses ? activation : "linear");
  const Output y = g.add(op, std::move(inputs), std::move(attrs));
  return fuses ? y : apply_activation(g, y, activation);
}

}  // namespace tctl
