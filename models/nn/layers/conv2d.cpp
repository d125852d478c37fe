// Conv2D: y = activation(conv(x, K) + b) over [batch, height, width, channels] inputs, with Keras' kernel
// layout [kh, kw, in_channels, filters] so Keras weights load without a transpose.
#include "core/kernel_context.h"
#include "models/nn/activations.h"
#include "models/nn/initializers.h"
#include "models/nn/layer.h"
#include "models/nn/layers/detail/conv_keys.h"
#include "models/nn/layers/detail/window_spec.h"

namespace tctl {
namespace {

class Conv2D final : public Layer {
 public:
  explicit Conv2D(LayerArgs& args) : Layer("Conv2D", args.name, args.device) {
    keys_ = detail::ConvKeys::read(args.spec);
    kernel_size_ = detail::positive_int_pair(args.spec, "kernel_size", {1, 1});
    strides_ = detail::positive_int_pair(args.spec, "strides", {1, 1});
    padding_ = detail::read_padding(args.spec);
  }

  Shape build(const Shape& input, const BuildContext& ctx, const SpecReader& where) override {
    detail::expect_image_input(input, "Conv2D", where);
    const detail::Pair out = detail::window_output(input, kernel_size_, strides_, padding_, where, "kernel_size");
    const std::int64_t channels = input[2];
    const Shape kernel{kernel_size_[0], kernel_size_[1], channels, keys_.filters}, bias{keys_.filters};
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
    const std::int64_t fan_in = receptive * channels, fan_out = receptive * keys_.filters;
    const std::uint64_t base = ctx.key();
    add_variable(ctx, "kernel", kernel, [&] { return initialize(keys_.kernel_init, kernel, fan_in, fan_out, base); });
    if (keys_.use_bias)
      add_variable(ctx, "bias", bias,
                   [&] { return initialize(keys_.bias_init, bias, fan_in, fan_out, mix64(base + 1)); });
    return Shape{out[0], out[1], keys_.filters};
  }

  Output call(Graph& g, Output x, bool) override {
    // Convolution and bias make one node, with the ReLU too; any other activation follows as its own op.
    Attrs attrs = detail::window_attrs(strides_, padding_);
    if (!keys_.use_bias)
      return apply_activation(g, g.add("Conv2D", {x, read(g, 0)}, std::move(attrs)), keys_.activation);
    return add_fused_with_bias(g, "FusedConv2D", {x, read(g, 0), read(g, 1)}, std::move(attrs), keys_.activation);
  }

  // Conv between Transposes to NCHW and back, then the activation; "same" is SAME_UPPER, TF's rule.
  std::string to_onnx(OnnxWriter& w, const std::string& x) const override {
    // Keras' kernel [kh, kw, in, out] becomes ONNX's [out, in, kh, kw].
    const Tensor kernel = value("kernel");
    const auto& k = kernel.shape().dims();
    const std::vector<float> oihw = detail::onnx_conv_kernel(kernel.to_floats(), k[0], k[1], k[2], k[3]);
    std::vector<std::string> inputs{onnx_to_nchw(w, name(), x),
                                    w.initializer(variable_name("kernel"), {k[3], k[2], k[0], k[1]}, oihw)};
    if (keys_.use_bias) inputs.push_back(w.weight(variable_name("bias"), value("bias")));
    const std::string y =
        w.op("Conv", name(), inputs,
             {OnnxAttr::ints("kernel_shape", {k[0], k[1]}), OnnxAttr::ints("strides", {strides_[0], strides_[1]}),
              OnnxAttr::text("auto_pad", detail::onnx_auto_pad(padding_))});
    return activation_to_onnx(w, name(), keys_.activation, onnx_to_nhwc(w, name(), y));
  }

  nlohmann::json config() const override {
    return keys_.with({{"kernel_size", detail::pair_json(kernel_size_)},
                       {"strides", detail::pair_json(strides_)},
                       {"padding", padding_}});
  }

 private:
  detail::ConvKeys keys_;
  detail::Pair kernel_size_{}, strides_{};
  std::string padding_;
};

}  // namespace

std::unique_ptr<Layer> make_conv2d(LayerArgs& args) { return std::make_unique<Conv2D>(args); }

void keras_conv2d(KerasConfig& c, nlohmann::json& out, KerasLayerWalk&) {
  detail::ConvKeys::from_keras(c, out);
  out["kernel_size"] = *c.int_pair("kernel_size");
  out["strides"] = c.int_pair("strides").value_or(nlohmann::json::array({1, 1}));
  out["padding"] = c.one_of("padding", {"valid", "same"}, "valid");
  if (auto dilation = c.int_pair("dilation_rate"); dilation && *dilation != nlohmann::json::array({1, 1}))
    c.fail("dilation_rate", "dilation_rate " + dilation->dump() + " is not supported (only 1)");
}

}  // namespace tctl
