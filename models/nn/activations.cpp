#include "models/nn/activations.h"

#include "core/errors.h"

namespace tctl {

namespace {

struct ActivationOp {
  const char* name;
  const char* op;
  double alpha;  // the op's "alpha" attribute; negative: it has none
  bool scores;   // see activation_gives_scores
};

// Keras 3's defaults for the string forms: leaky_relu's negative_slope 0.2 (the LeakyReLU layer's is 0.3),
// elu's alpha 1; gelu is the exact (erf) form.
constexpr ActivationOp kActivationOps[] = {
    {"elu", "Elu", 1.0, true},   {"gelu", "Gelu", -1, true},        {"leaky_relu", "LeakyRelu", 0.2, true},
    {"relu", "Relu", -1, false}, {"sigmoid", "Sigmoid", -1, false}, {"softmax", "Softmax", -1, true},
    {"tanh", "Tanh", -1, false},
};

const ActivationOp* find_activation(std::string_view name) {
  for (const auto& a : kActivationOps)
    if (name == a.name) return &a;
  return nullptr;
}

}  // namespace

Output apply_activation(Graph& g, Output x, const std::string& name) {
  if (name == "linear") return x;
  const ActivationOp* a = find_activation(name);
  TCTL_CHECK(a != nullptr, "activation not validated: " + name);
  if (a->alpha < 0) return g.add(a->op, {x});
  return g.add(a->op, {x}, Attrs{{"alpha", a->alpha}});
}

OutputActivation output_activation(const Node& n) {
  // A fused product names the activation it applies in its attributes.
  if (n.attrs.has("activation")) {
    const ActivationOp* a = find_activation(n.attrs.s("activation"));
    if (a != nullptr) return {a->name, a->op};
    return {"", n.op->name};
  }
  for (const auto& a : kActivationOps)
    if (n.op->name == a.op) return {a.name, a.op};
  return {"", n.op->name};
}

bool activation_gives_scores(const std::string& name) {
  const ActivationOp* a = find_activation(name);
  return a == nullptr || a->scores;
}

Output add_fused_with_bias(Graph& g, std::string_view op, std::vector<Output> inputs, Attrs attrs,
                           const std::string& activation) {
  const bool fuses = fusable_activation(activation);
  attrs.set("activation", fuses ? activation : "linear");
  const Output y = g.add(op, std::move(inputs), std::move(attrs));
  return fuses ? y : apply_activation(g, y, activation);
}

std::string activation_to_onnx(OnnxWriter& w, const std::string& layer, const std::string& name, const std::string& x) {
  if (name == "linear") return x;
  if (name == "relu") return w.op("Relu", layer, {x});
  if (name == "sigmoid") return w.op("Sigmoid", layer, {x});
  if (name == "tanh") return w.op("Tanh", layer, {x});
  if (name == "softmax") return w.op("Softmax", layer, {x}, {OnnxAttr::integer("axis", -1)});
  if (name == "leaky_relu") return w.op("LeakyRelu", layer, {x}, {OnnxAttr::real("alpha", 0.2f)});
  if (name == "elu") return w.op("Elu", layer, {x}, {OnnxAttr::real("alpha", 1.0f)});
  if (name == "gelu") {
    // 0.5 x (1 + erf(x / sqrt 2)): the exact GELU (opset 20 has an operator; 17 does not).
    const std::string scaled = w.op("Mul", layer, {x, w.initializer(layer + "/inv_sqrt2", {}, {0.70710678f})});
    const std::string one_plus =
        w.op("Add", layer, {w.op("Erf", layer, {scaled}), w.initializer(layer + "/one", {}, {1.0f})});
    const std::string half_x = w.op("Mul", layer, {x, w.initializer(layer + "/half", {}, {0.5f})});
    return w.op("Mul", layer, {half_x, one_plus});
  }
  throw SpecError("model.json", layer, "ONNX export has no form for activation \"" + name + "\"");
}

}  // namespace tctl
