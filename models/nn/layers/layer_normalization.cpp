// LayerNormalization over the last axis: each example's (each step's) features normalized by their own mean
// and variance, y = gamma (x - mean) / sqrt(variance + epsilon) + beta, the same in training and inference
// (no moving statistics). Variables, in Keras' order: gamma (when scale), beta (when center).
#include <limits>

#include "models/nn/layer.h"
#include "models/nn/layers/detail/last_axis.h"

namespace tctl {
namespace {

class LayerNormalization final : public Layer {
 public:
  explicit LayerNormalization(LayerArgs& args) : Layer("LayerNormalization", args.name, args.device) {
    axis_json_ = detail::read_last_axis(args.spec, true);
    epsilon_ = args.spec.number_in("epsilon", 1e-3, 1e-30, std::numeric_limits<double>::infinity());
    center_ = args.spec.boolean("center", true);
    scale_ = args.spec.boolean("scale", true);
  }

  Shape build(const Shape& input, const BuildContext& ctx, const SpecReader& where) override {
    if (input.rank() < 1) where.fail_here("LayerNormalization needs an input with a feature axis");
    detail::check_last_axis(axis_json_, input, where);
    features_ = input[input.rank() - 1];
    const Shape shape{features_};
    if (scale_) add_variable(ctx, "gamma", shape, [&] { return Tensor::filled(shape, 1.0f); });
    if (center_) add_variable(ctx, "beta", shape, [&] { return Tensor::zeros(DType::kF32, shape); });
    return input;
  }

  Output call(Graph& g, Output x, bool) override {
    std::size_t next = 0;
    const Output gamma = scale_ ? read(g, next++) : g.constant(Tensor::filled(Shape{features_}, 1.0f));
    const Output beta = center_ ? read(g, next++) : g.constant(Tensor::zeros(DType::kF32, Shape{features_}));
    return g.add("LayerNorm", {x, gamma, beta}, Attrs{{"epsilon", epsilon_}});
  }

  // ONNX's own LayerNormalization (opset 17) over the last axis.
  std::string to_onnx(OnnxWriter& w, const std::string& x) const override {
    const Tensor gamma = scale_ ? value("gamma") : Tensor::filled(Shape{features_}, 1.0f);
    const Tensor beta = center_ ? value("beta") : Tensor::zeros(DType::kF32, Shape{features_});
    return w.op("LayerNormalization", name(),
                {x, w.weight(variable_name("gamma"), gamma), w.weight(variable_name("beta"), beta)},
                {OnnxAttr::integer("axis", -1), OnnxAttr::real("epsilon", static_cast<float>(epsilon_))});
  }

  // Each step on its own: a mask passes through (Keras' masking).
  MaskUse mask_use() const override { return MaskUse::kPasses; }

  nlohmann::json config() const override {
    return {{"axis", -1}, {"epsilon", epsilon_}, {"center", center_}, {"scale", scale_}};
  }

 private:
  nlohmann::json axis_json_ = -1;
  double epsilon_ = 1e-3;
  bool center_ = true, scale_ = true;
  std::int64_t features_ = 0;
};

}  // namespace

std::unique_ptr<Layer> make_layer_normalization(LayerArgs& args) { return std::make_unique<LayerNormalization>(args); }

void keras_layer_normalization(KerasConfig& c, nlohmann::json& out, KerasLayerWalk& walk) {
  walk.take_mask(true);
  const nlohmann::json* axis = c.take("axis");
  nlohmann::json a = axis == nullptr || axis->is_null() ? nlohmann::json(-1) : keras_list(*axis);
  if (a.is_array() && a.size() == 1) a = a[0];
  if (!(a == -1 || (a.is_number_integer() && a.get<std::int64_t>() == static_cast<std::int64_t>(walk.rank))))
    c.fail("axis", "only the last axis is supported, got " + a.dump());
  out["axis"] = -1;
  out["epsilon"] = c.number("epsilon", 1e-3);
  out["center"] = c.boolean("center", true);
  out["scale"] = c.boolean("scale", true);
  for (const char* key : {"beta_initializer", "gamma_initializer"}) {
    const std::string want = std::string(key) == "beta_initializer" ? "zeros" : "ones";
    const nlohmann::json* init = c.take(key);
    const bool fine = init == nullptr || init->is_null() || *init == want ||
                      (init->is_object() && init->value("class_name", "") == (want == "zeros" ? "Zeros" : "Ones"));
    if (!fine) c.fail(key, std::string(key) + " other than " + want + " is not supported");
  }
  c.require_false({"rms_scaling"});
  c.require_null({"beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint"});
}

}  // namespace tctl
