// Conv2D: y = activation(conv(x, K) + b) over [batch, height, width, channels] inputs, with Keras' kernel
// layout [kh, kw, in_channels, filters] so Keras weights load without a transpose.
#include "core/kernel_context.h"
#include "models/nn/activations.h"
#include "models/nn/initializers.h"
#include "models/nn/layer.h"
#include "models/nn/layers/detail/window_spec.h"

namespace tctl {
namespace {

class Conv2D final : public Layer {
 public:
  explicit Conv2D(LayerArgs& args) : Layer("Conv2D", args.name, args.device) {
    filters_ = args.spec.positive_int("filters");
    if (!args.spec.has("kernel_size")) args.spec.fail_here("missing required key \"kernel_size\"");
    kernel_size_ = detail::positive_int_pair(args.spec, "kernel_size", {1, 1});
    strides_ = detail::positive_int_pair(args.spec, "strides", {1, 1});
    padding_ = detail::read_padding(args.spec);
    activation_ = args.spec.one_of("activation", activation_names(), "linear");
    use_bias_ = args.spec.boolean("use_bias", true);
    kernel_init_ = args.spec.one_of("kernel_initializer", initializer_names(), "glorot_uniform");
    bias_init_ = args.spec.one_of("bias_initializer", initializer_names(), "zeros");
  }

  Shape build(const Shape& input, const BuildContext& ctx, const SpecReader& where) override {
    detail::expect_image_input(input, "Conv2D", where);
    const detail::Pair out = detail::window_output(input, kernel_size_, strides_, padding_, where, "kernel_size");
    const std::int64_t channels = input[2];
    const Shape kernel{kernel_size_[0], kernel_size_[1], channels, filters_}, bias{filters_};
    // Sizes past this are typos, and would otherwise surface as an allocation failure.
    constexpr std::int64_t kMaxKernelElements = std::int64_t{1} << 31;
    const auto kernel_elements = bounded_num_elements(kernel);
    if (!kernel_elements || *kernel_elements > kMaxKernelElements)
      where.fail("filters",
                 "a kernel of " + kernel.to_string() + " (" +
                     (kernel_elements ? std::to_string(*kernel_elements) : approximate_num_elements(kernel)) +
                     " weights) is larger than the 2^31 elements tensorctl supports");
    const std::int64_t receptive = kernel_size_[0] * kernel_size_[1];
    // Keras' fans for a convolution: the receptive field times the input or output channels.
    const std::int64_t fan_in = receptive * channels, fan_out = receptive * filters_;
    const std::uint64_t base = ctx.key();
    add_variable(ctx, "kernel", kernel, [&] { return initialize(kernel_init_, kernel, fan_in, fan_out, base); });
    if (use_bias_)
      add_variable(ctx, "bias", bias, [&] { return initialize(bias_init_, bias, fan_in, fan_out, mix64(base + 1)); });
    return Shape{out[0], out[1], filters_};
  }

  Output call(Graph& g, Output x, bool) override {
    // Convolution and bias make one node, with the ReLU too; any other activation follows as its own op.
    Attrs attrs = detail::window_attrs(strides_, padding_);
    if (!use_bias_) return apply_activation(g, g.add("Conv2D", {x, read(g, 0)}, std::move(attrs)), activation_);
    return add_fused_with_bias(g, "FusedConv2D", {x, read(g, 0), read(g, 1)}, std::move(attrs), activation_);
  }

  // Conv between Transposes to NCHW and back, then the activation; "same" is SAME_UPPER, TF's rule.
  std::string to_onnx(OnnxWriter& w, const std::string& x) const override {
    // Keras' kernel [kh, kw, in, out] becomes ONNX's [out, in, kh, kw].
    const Tensor kernel = value("kernel");
    const auto& k = kernel.shape().dims();
    const std::vector<float> src = kernel.to_floats();
    std::vector<float> oihw(src.size());
    for (std::int64_t i = 0; i < k[0]; ++i)
      for (std::int64_t j = 0; j < k[1]; ++j)
        for (std::int64_t c = 0; c < k[2]; ++c)
          for (std::int64_t o = 0; o < k[3]; ++o)
            oihw[static_cast<std::size_t>(((o * k[2] + c) * k[0] + i) * k[1] + j)] =
                src[static_cast<std::size_t>(((i * k[1] + j) * k[2] + c) * k[3] + o)];
    std::vector<std::string> inputs{onnx_to_nchw(w, name(), x),
                                    w.initializer(variable_name("kernel"), {k[3], k[2], k[0], k[1]}, oihw)};
    if (use_bias_) inputs.push_back(w.weight(variable_name("bias"), value("bias")));
    const std::string y =
        w.op("Conv", name(), inputs,
             {OnnxAttr::ints("kernel_shape", {k[0], k[1]}), OnnxAttr::ints("strides", {strides_[0], strides_[1]}),
              OnnxAttr::text("auto_pad", detail::onnx_auto_pad(padding_))});
    return activation_to_onnx(w, name(), activation_, onnx_to_nhwc(w, name(), y));
  }

  nlohmann::json config() const override {
    return {{"filters", filters_},
            {"kernel_size", detail::pair_json(kernel_size_)},
            {"strides", detail::pair_json(strides_)},
            {"padding", padding_},
            {"activation", activation_},
            {"use_bias", use_bias_},
            {"kernel_initializer", kernel_init_},
            {"bias_initializer", bias_init_}};
  }

 private:
  std::int64_t filters_ = 0;
  detail::Pair kernel_size_{}, strides_{};
  std::string padding_, activation_;
  bool use_bias_ = true;
  std::string kernel_init_, bias_init_;
};

}  // namespace

std::unique_ptr<Layer> make_conv2d(LayerArgs& args) { return std::make_unique<Conv2D>(args); }

void keras_conv2d(KerasConfig& c, nlohmann::json& out, KerasLayerWalk&) {
  out["filters"] = c.positive_int("filters");
  auto kernel = c.int_pair("kernel_size");
  if (!kernel) c.fail("kernel_size", "missing required option kernel_size");
  out["kernel_size"] = *kernel;
  out["strides"] = c.int_pair("strides").value_or(nlohmann::json::array({1, 1}));
  out["padding"] = c.one_of("padding", {"valid", "same"}, "valid");
  out["activation"] = c.activation("activation", false);
  out["use_bias"] = c.boolean("use_bias", true);
  out["kernel_initializer"] = c.initializer("kernel_initializer", keras_weight_initializers(), "glorot_uniform");
  out["bias_initializer"] = c.initializer("bias_initializer", keras_weight_initializers(), "zeros");
  c.require_channels_last();
  if (auto dilation = c.int_pair("dilation_rate"); dilation && *dilation != nlohmann::json::array({1, 1}))
    c.fail("dilation_rate", "dilation_rate " + dilation->dump() + " is not supported (only 1)");
  if (const nlohmann::json* groups = c.take("groups"); groups && !groups->is_null() && *groups != nlohmann::json(1))
    c.fail("groups", "groups " + groups->dump() + " is not supported (only 1)");
  c.require_null(
      {"kernel_regularizer", "bias_regularizer", "activity_regularizer", "kernel_constraint", "bias_constraint"});
}

}  // namespace tctl
