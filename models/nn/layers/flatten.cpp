// Flatten: (None, d1, d2, ...) -> (None, d1 * d2 * ...), keeping the element order (row-major, as Keras'
// channels_last Flatten), so a Dense layer can follow a convolution.
#include "models/nn/layer.h"

namespace tctl {
namespace {

class Flatten final : public Layer {
 public:
  explicit Flatten(LayerArgs& args) : Layer("Flatten", args.name, args.device) {}
  Shape build(const Shape& input, const BuildContext&, const SpecReader&) override {
    features_ = input.num_elements();
    return Shape{features_};
  }
  bool keeps_values() const override { return true; }
  Output call(Graph& g, Output x, bool) override {
    return g.add("Reshape", {x}, Attrs{{"shape", std::vector<std::int64_t>{features_}}});
  }
  std::string to_onnx(OnnxWriter& w, const std::string& x) const override {
    return w.op("Flatten", name(), {x}, {OnnxAttr::integer("axis", 1)});
  }
  nlohmann::json config() const override { return nlohmann::json::object(); }

 private:
  std::int64_t features_ = 0;
};

}  // namespace

std::unique_ptr<Layer> make_flatten(LayerArgs& args) { return std::make_unique<Flatten>(args); }

void keras_flatten(KerasConfig& c, nlohmann::json&, KerasLayerWalk& walk) {
  c.require_channels_last();
  walk.rank = 1;
}

}  // namespace tctl
