// BatchNormalization over the last axis: y = gamma (x - mean) / sqrt(variance + epsilon) + beta.
//
// Training normalizes with the batch's statistics (over every axis but the last) and moves the
// non-trainable moving_mean and moving_variance toward them, m = momentum m + (1 - momentum) batch, as
// Keras does; inference normalizes with the moving statistics. Variables, in Keras' order: gamma (when
// scale), beta (when center), moving_mean, moving_variance; checkpoints save all four.
//
// Under a padding mask (an Embedding's mask_zero), training takes the statistics over the kept steps only,
// as Keras 3 does, and normalizes every step with them; the mask passes on.
#include <cmath>
#include <limits>
#include <optional>

#include "models/nn/layer.h"
#include "models/nn/layers/detail/last_axis.h"

namespace tctl {
namespace {

class BatchNormalization final : public Layer {
 public:
  explicit BatchNormalization(LayerArgs& args) : Layer("BatchNormalization", args.name, args.device) {
    axis_json_ = detail::read_last_axis(args.spec, false);
    momentum_ = args.spec.number_in("momentum", 0.99, 0.0, 1.0, true);
    epsilon_ = args.spec.number_in("epsilon", 1e-3, 1e-30, std::numeric_limits<double>::infinity());
    center_ = args.spec.boolean("center", true);
    scale_ = args.spec.boolean("scale", true);
  }

  Shape build(const Shape& input, const BuildContext& ctx, const SpecReader& where) override {
    if (input.rank() < 1) where.fail_here("BatchNormalization needs an input with a feature axis");
    detail::check_last_axis(axis_json_, input, where);
    const std::int64_t c = input[input.rank() - 1];
    const Shape shape{c};
    auto ones = [&] { return Tensor::filled(shape, 1.0f); };
    auto zeros = [&] { return Tensor::zeros(DType::kF32, shape); };
    if (scale_) add_variable(ctx, "gamma", shape, ones);
    if (center_) add_variable(ctx, "beta", shape, zeros);
    moving_mean_ = add_variable(ctx, "moving_mean", shape, zeros, false);
    moving_variance_ = add_variable(ctx, "moving_variance", shape, ones, false);
    channels_ = c;
    return input;
  }

  Output call(Graph& g, Output x, bool training) override { return normalize(g, x, std::nullopt, training); }

  MaskUse mask_use() const override { return MaskUse::kUsesAndPasses; }
  Output call_masked(Graph& g, Output x, Output mask, bool training) override {
    return normalize(g, x, mask, training);
  }
  // Inference uses the moving statistics, whatever the mask.
  std::string to_onnx_masked(OnnxWriter& w, const std::string& x, const std::string&) const override {
    return to_onnx(w, x);
  }

  // x normalized with the batch's statistics in training, over the steps `mask` keeps where there is one.
  Output normalize(Graph& g, Output x, std::optional<Output> mask, bool training) {
    std::size_t next = 0;
    const Output gamma = scale_ ? read(g, next++) : g.constant(Tensor::filled(Shape{channels_}, 1.0f));
    const Output beta = center_ ? read(g, next++) : g.constant(Tensor::zeros(DType::kF32, Shape{channels_}));
    const Attrs eps{{"epsilon", epsilon_}};
    if (!training) return g.add("BatchNorm", {x, g.read(moving_mean_), g.read(moving_variance_), gamma, beta}, eps);

    const Output mean = mask ? g.add("BatchNormMaskedMean", {x, *mask}) : g.add("BatchNormMean", {x});
    const Output variance = mask ? g.add("BatchNormMaskedVariance", {x, *mask}) : g.add("BatchNormVariance", {x});
    // The updates are writes to the moving statistics, ordered with other uses of those variables by the
    // automatic control dependencies. Nothing consumes their outputs, so the normalized output waits for
    // them (control inputs point to earlier nodes, so the updates come first): whatever runs the layer's
    // output runs the updates too.
    const Attrs momentum{{"momentum", momentum_}};
    const Output update_mean = g.add("AssignMovingAverage", {mean}, momentum, {{moving_mean_, true}});
    const Output update_variance = g.add("AssignMovingAverage", {variance}, momentum, {{moving_variance_, true}});
    const Output y = g.add("BatchNorm", {x, mean, variance, gamma, beta}, eps);
    g.add_control_input(y.node, update_mean.node);
    g.add_control_input(y.node, update_variance.node);
    return y;
  }

  // The inference form (x - mean) * gamma / sqrt(variance + epsilon) + beta as Sub, Mul and Add.
  std::string to_onnx(OnnxWriter& w, const std::string& x) const override {
    const Tensor mean = value("moving_mean");
    const std::vector<float> variance = value("moving_variance").to_floats();
    std::vector<float> scale(variance.size(), 1.0f), shift(variance.size(), 0.0f);
    if (scale_) scale = value("gamma").to_floats();
    if (center_) shift = value("beta").to_floats();
    // gamma * (1 / sqrt(variance + epsilon)), the inverse computed in double as the kernel does.
    for (std::size_t j = 0; j < scale.size(); ++j)
      scale[j] = scale[j] * static_cast<float>(1.0 / std::sqrt(static_cast<double>(variance[j]) + epsilon_));
    const std::int64_t c = static_cast<std::int64_t>(scale.size());
    const std::string centred = w.op("Sub", name(), {x, w.weight(variable_name("moving_mean"), mean)});
    const std::string scaled = w.op("Mul", name(), {centred, w.initializer(variable_name("scale"), {c}, scale)});
    return w.op("Add", name(), {scaled, w.initializer(variable_name("shift"), {c}, shift)});
  }

  nlohmann::json config() const override {
    return {
        {"axis", axis_json_}, {"momentum", momentum_}, {"epsilon", epsilon_}, {"center", center_}, {"scale", scale_}};
  }

 private:
  nlohmann::json axis_json_ = -1;
  double momentum_ = 0.99;
  double epsilon_ = 1e-3;
  bool center_ = true;
  bool scale_ = true;
  std::int64_t channels_ = 0;
  std::shared_ptr<Variable> moving_mean_, moving_variance_;
};

}  // namespace

std::unique_ptr<Layer> make_batch_normalization(LayerArgs& args) { return std::make_unique<BatchNormalization>(args); }

// Keras' BatchNormalization supports masking: its training moments leave the padding out, and the mask passes.
void keras_batch_normalization(KerasConfig& c, nlohmann::json& out, KerasLayerWalk& walk) {
  walk.take_mask(true);
  // Keras writes -1 before the layer is built and the resolved index ([3] for an image) after; the index
  // counts the batch, so the last axis is `rank`.
  if (const nlohmann::json* raw = c.take("axis"); raw && !raw->is_null()) {
    const nlohmann::json& v = keras_list(*raw);
    const nlohmann::json& axis = v.is_array() && v.size() == 1 ? v[0] : v;
    const bool last = axis.is_number_integer() && (axis.get<std::int64_t>() == -1 ||
                                                   axis.get<std::int64_t>() == static_cast<std::int64_t>(walk.rank));
    if (!last) c.fail("axis", "axis " + raw->dump() + " is not supported (only the last axis, -1)");
  }
  out["axis"] = -1;
  out["momentum"] = c.number("momentum", 0.99);
  out["epsilon"] = c.number("epsilon", 0.001);
  out["center"] = c.boolean("center", true);
  out["scale"] = c.boolean("scale", true);
  c.initializer("beta_initializer", {"zeros"}, "zeros");
  c.initializer("gamma_initializer", {"ones"}, "ones");
  c.initializer("moving_mean_initializer", {"zeros"}, "zeros");
  c.initializer("moving_variance_initializer", {"ones"}, "ones");
  c.require_null({"beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint"});
  c.require_false({"synchronized", "renorm"});
  // Only used by renormalization, which is off once the line above passed.
  c.take("renorm_momentum");
}

}  // namespace tctl
