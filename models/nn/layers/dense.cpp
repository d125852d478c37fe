// Dense: y = activation(x W + b) over the last dimension of its input: a [batch, features] input, or as in
// Keras each step of a [batch, steps, features] one (each pixel of an image), in one product of all the
// steps' rows (MatMul's leading dimensions).
#include "core/errors.h"
#include "core/kernel_context.h"
#include "models/nn/activations.h"
#include "models/nn/initializers.h"
#include "models/nn/layer.h"

namespace tctl {
namespace {

class Dense final : public Layer {
 public:
  explicit Dense(LayerArgs& args) : Layer("Dense", args.name, args.device) {
    units_ = args.spec.positive_int("units");
    activation_ = args.spec.one_of("activation", activation_names(), "linear");
    use_bias_ = args.spec.boolean("use_bias", true);
    kernel_init_ = args.spec.one_of("kernel_initializer", initializer_names(), "glorot_uniform");
    bias_init_ = args.spec.one_of("bias_initializer", initializer_names(), "zeros");
  }

  Shape build(const Shape& input, const BuildContext& ctx, const SpecReader& where) override {
    const std::int64_t in = input[input.rank() - 1];
    // Sizes past this are typos, and would otherwise surface as an allocation failure.
    constexpr std::int64_t kMaxKernelElements = std::int64_t{1} << 31;
    if (units_ > kMaxKernelElements / in)
      where.fail("units", "a kernel of " + std::to_string(in) + " x " + std::to_string(units_) +
                              " weights is larger than the 2^31 elements tensorctl supports");
    const std::uint64_t base = ctx.key();
    const Shape kernel{in, units_}, bias{units_};
    add_variable(ctx, "kernel", kernel, [&] { return initialize(kernel_init_, kernel, in, units_, base); });
    if (use_bias_)
      add_variable(ctx, "bias", bias, [&] { return initialize(bias_init_, bias, in, units_, mix64(base + 1)); });
    Shape out = input;
    out.set_dim(out.rank() - 1, units_);
    return out;
  }

  // Each step on its own: a mask passes through, as Keras 3's Dense passes it.
  MaskUse mask_use() const override { return MaskUse::kPasses; }

  Output call(Graph& g, Output x, bool training) override {
    // Product and bias make one node, with the ReLU too; any other activation follows as its own op.
    if (!use_bias_) return apply_activation(g, g.add("MatMul", {x, read(g, 0)}), activation_);
    return add_fused_with_bias(g, "FusedMatMul", {x, read(g, 0), read(g, 1)}, {}, activation_);
  }

  // MatMul, then Add for the bias, then the activation.
  std::string to_onnx(OnnxWriter& w, const std::string& x) const override {
    std::string y = w.op("MatMul", name(), {x, w.weight(variable_name("kernel"), value("kernel"))});
    if (use_bias_) y = w.op("Add", name(), {y, w.weight(variable_name("bias"), value("bias"))});
    return activation_to_onnx(w, name(), activation_, y);
  }

  nlohmann::json config() const override {
    return {{"units", units_},
            {"activation", activation_},
            {"use_bias", use_bias_},
            {"kernel_initializer", kernel_init_},
            {"bias_initializer", bias_init_}};
  }

 private:
  std::int64_t units_ = 0;
  std::string activation_;
  bool use_bias_ = true;
  std::string kernel_init_, bias_init_;
};

}  // namespace

std::unique_ptr<Layer> make_dense(LayerArgs& args) { return std::make_unique<Dense>(args); }

// Keras 3's Dense passes a mask on (it computes on every step, as here).
void keras_dense(KerasConfig& c, nlohmann::json& out, KerasLayerWalk& walk) {
  walk.take_mask(true);
  out["units"] = c.positive_int("units");
  out["activation"] = c.activation("activation", false);
  out["use_bias"] = c.boolean("use_bias", true);
  out["kernel_initializer"] = c.initializer("kernel_initializer", keras_weight_initializers(), "glorot_uniform");
  out["bias_initializer"] = c.initializer("bias_initializer", keras_weight_initializers(), "zeros");
  c.require_null(
      {"kernel_regularizer", "bias_regularizer", "activity_regularizer", "kernel_constraint", "bias_constraint"});
}

}  // namespace tctl
