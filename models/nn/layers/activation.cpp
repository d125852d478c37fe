// Activation: applies an activation function elementwise; no parameters.
#include "models/nn/activations.h"
#include "models/nn/layer.h"

namespace tctl {
namespace {

class Activation final : public Layer {
 public:
  explicit Activation(LayerArgs& args) : Layer("Activation", args.name, args.device) {
    activation_ = args.spec.one_of("activation", activation_names(), "");
  }
  Shape build(const Shape& input, const BuildContext&, const SpecReader&) override { return input; }
  Output call(Graph& g, Output x, bool) override { return apply_activation(g, x, activation_); }
  std::string to_onnx(OnnxWriter& w, const std::string& x) const override {
    return activation_to_onnx(w, name(), activation_, x);
  }
  // Each step on its own: a mask passes through (Keras' masking).
  MaskUse mask_use() const override { return MaskUse::kPasses; }

  nlohmann::json config() const override { return {{"activation", activation_}}; }

 private:
  std::string activation_;
};

}  // namespace

std::unique_ptr<Layer> make_activation(LayerArgs& args) {
  if (!args.spec.has("activation")) args.spec.fail_here("missing required key \"activation\"");
  return std::make_unique<Activation>(args);
}

void keras_activation(KerasConfig& c, nlohmann::json& out, KerasLayerWalk& walk) {
  out["activation"] = c.activation("activation", true);
  walk.take_mask(true);
}

}  // namespace tctl
