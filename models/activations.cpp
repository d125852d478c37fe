#include "models/activations.h"

#include "core/errors.h"

namespace tctl {

const std::vector<std::string>& activation_names() {
  static const std::vector<std::string> names{"linear", "relu", "sigmoid", "softmax", "tanh"};
  return names;
}

Output apply_activation(Graph& g, Output x, const std::string& name) {
  if (name == "linear") return x;
  if (name == "relu") return g.add("Relu", {x});
  if (name == "sigmoid") return g.add("Sigmoid", {x});
  if (name == "tanh") return g.add("Tanh", {x});
  if (name == "softmax") return g.add("Softmax", {x});
  TCTL_CHECK(false, "activation not validated: " + name);
}

}  // namespace tctl
