// Dropout: in training, zeroes a fraction `rate` of the inputs and scales the rest up; identity otherwise.
#include "models/nn/layer.h"

namespace tctl {
namespace {

class Dropout final : public Layer {
 public:
  explicit Dropout(LayerArgs& args) : Layer("Dropout", args.name, args.device) {
    if (!args.spec.has("rate")) args.spec.fail_here("missing required key \"rate\"");
    rate_ = args.spec.number_in("rate", 0.0, 0.0, 1.0);
  }
  // The mask's random stream is keyed by the layer's place in the model, so it stays the same when the
  // graph around the layer gains or loses nodes.
  Shape build(const Shape& input, const BuildContext& ctx, const SpecReader&) override {
    stream_ = static_cast<std::int64_t>(ctx.key(0x44726f70ull) >> 1);
    return input;
  }
  Output call(Graph& g, Output x, bool training) override {
    if (!training || rate_ == 0.0) return x;
    return g.add("Dropout", {x}, Attrs{{"rate", rate_}, {"stream", stream_}});
  }
  // Inference drops nothing.
  std::string to_onnx(OnnxWriter& w, const std::string& x) const override { return w.op("Identity", name(), {x}); }
  // Each step on its own: a mask passes through (Keras' masking).
  MaskUse mask_use() const override { return MaskUse::kPasses; }

  nlohmann::json config() const override { return {{"rate", rate_}}; }

 private:
  double rate_ = 0.0;
  std::int64_t stream_ = 0;
};

}  // namespace

std::unique_ptr<Layer> make_dropout(LayerArgs& args) { return std::make_unique<Dropout>(args); }

void keras_dropout(KerasConfig& c, nlohmann::json& out, KerasLayerWalk& walk) {
  walk.take_mask(true);
  const nlohmann::json* rate = c.take("rate");
  if (!rate) c.fail("rate", "missing required option rate");
  if (!rate->is_number() || rate->get<double>() < 0.0 || rate->get<double>() >= 1.0)
    c.fail("rate", "expected a number in [0, 1), " + describe_json(*rate));
  out["rate"] = *rate;
  c.require_null({"noise_shape", "seed"});
}

}  // namespace tctl
