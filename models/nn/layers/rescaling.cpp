// Rescaling: y = x * scale + offset, elementwise; no parameters. Keras' image models start with it
// (Rescaling(1. / 255) to read pixels as 0..1, or scale 1 / 127.5 with offset -1 for -1..1), so a Keras image
// classifier imports and trains as written.
#include <cfloat>

#include "models/nn/layer.h"

namespace tctl {
namespace {

class Rescaling final : public Layer {
 public:
  explicit Rescaling(LayerArgs& args) : Layer("Rescaling", args.name, args.device) {
    if (!args.spec.has("scale")) args.spec.fail_here("missing required key \"scale\"");
    // Within float's range: the product runs in float32.
    scale_ = args.spec.number_in("scale", 1.0, -FLT_MAX, FLT_MAX, true);
    offset_ = args.spec.number_in("offset", 0.0, -FLT_MAX, FLT_MAX, true);
  }
  Shape build(const Shape& input, const BuildContext&, const SpecReader&) override {
    channels_ = input.dims().back();
    return input;
  }
  Output call(Graph& g, Output x, bool) override {
    if (scale_ != 1.0) x = g.add("Scale", {x}, Attrs{{"factor", scale_}});
    if (offset_ == 0.0) return x;
    // The offset as a bias of every channel: BiasAdd adds it along the last axis, with a gradient on any device.
    return g.add("BiasAdd", {x, g.constant(Tensor::filled(Shape{channels_}, static_cast<float>(offset_)))});
  }
  std::string to_onnx(OnnxWriter& w, const std::string& x) const override {
    const std::string scale = w.initializer(name() + "/scale", {}, {static_cast<float>(scale_)});
    const std::string offset = w.initializer(name() + "/offset", {}, {static_cast<float>(offset_)});
    return w.op("Add", name(), {w.op("Mul", name(), {x, scale}), offset});
  }
  // Each element on its own: a mask passes through (Keras 3's Rescaling supports masking).
  MaskUse mask_use() const override { return MaskUse::kPasses; }

  nlohmann::json config() const override { return {{"scale", scale_}, {"offset", offset_}}; }

 private:
  double scale_ = 1.0, offset_ = 0.0;
  std::int64_t channels_ = 1;
};

}  // namespace

std::unique_ptr<Layer> make_rescaling(LayerArgs& args) { return std::make_unique<Rescaling>(args); }

// Keras 2 and 3 both write scale and offset as numbers; a per-channel array (Keras 3 serializes it as an
// object) is refused by c.number, naming the key.
void keras_rescaling(KerasConfig& c, nlohmann::json& out, KerasLayerWalk& walk) {
  walk.take_mask(true);
  if (!c.has("scale")) c.fail("scale", "missing required option scale");
  out["scale"] = c.number("scale", 1.0);
  out["offset"] = c.number("offset", 0.0);
}

}  // namespace tctl
