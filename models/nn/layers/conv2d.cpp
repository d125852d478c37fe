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

}  // namespace tctl
