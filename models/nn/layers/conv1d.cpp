// Conv1D: y = activation(conv(x, K) + b) over [batch, steps, channels] inputs, with Keras' kernel layout
// [kernel_size, in_channels, filters]. It runs the 2-D convolution on the input seen as [steps, 1, channels]
// and the kernel as [kernel_size, 1, in, filters] (both reshapes share their buffers), so it has the 2-D
// kernels' speed on every device. padding "causal" (Keras': step t sees steps t - kernel_size + 1 .. t) pads
// kernel_size - 1 zero steps in front, as the input seen flat [steps x channels] padded on its last axis, and
// convolves "valid". A dilated convolution (dilation_rate d > 1, strides 1 as Keras requires) runs undilated
// on the input padded to a multiple of d steps and seen as [steps / d, d, channels]: a kernel of kernel_size x 1
// there sums x[(q + k) d + r] W[k] = the dilated output at step q d + r, every step of which is then read in
// order as [steps, filters]; the few outputs past the last (from the padding after) are sliced off.
#include "core/kernel_context.h"
#include "models/nn/activations.h"
#include "models/nn/initializers.h"
#include "models/nn/layer.h"
#include "models/nn/layers/detail/conv_keys.h"
#include "models/nn/layers/detail/window_spec.h"

namespace tctl {
namespace {

class Conv1D final : public Layer {
 public:
  explicit Conv1D(LayerArgs& args) : Layer("Conv1D", args.name, args.device) {
    keys_ = detail::ConvKeys::read(args.spec);
    kernel_size_ = detail::positive_int_single(args.spec, "kernel_size", 1);
    strides_ = detail::positive_int_single(args.spec, "strides", 1);
    padding_ = args.spec.one_of("padding", {"valid", "same", "causal"}, "valid");
    dilation_ = detail::positive_int_single(args.spec, "dilation_rate", 1);
    if (dilation_ > 1 && strides_ > 1)
      args.spec.fail("dilation_rate", "a dilation_rate above 1 needs strides 1, as in Keras");
  }

  Shape build(const Shape& input, const BuildContext& ctx, const SpecReader& where) override {
    if (input.rank() != 2)
      where.fail_here("Conv1D expects an input of shape (None, steps, channels), got " +
                      Shape::concat(-1, input).keras_string());
    steps_ = input[0];
    channels_ = input[1];
    if (dilation_ > 1 && padding_ == "valid" && span() > steps_)
      where.fail("dilation_rate", "kernel_size " + std::to_string(kernel_size_) + " at dilation_rate " +
                                      std::to_string(dilation_) + " spans " + std::to_string(span()) +
                                      " steps, more than the input's " + std::to_string(steps_));
    out_steps_ = detail::window_output_1d(steps_ + padded(), span(), strides_, causal() ? "valid" : padding_, where,
                                          "kernel_size");
    const Shape kernel{kernel_size_, channels_, keys_.filters}, bias{keys_.filters};
    // Sizes past this are typos, and would otherwise surface as an allocation failure.
    constexpr std::int64_t kMaxKernelElements = std::int64_t{1} << 31;
    const auto kernel_elements = bounded_num_elements(kernel);
    if (!kernel_elements || *kernel_elements > kMaxKernelElements)
      where.fail("filters",
                 "a kernel of " + kernel.to_string() + " is larger than the 2^31 elements tensorctl supports");
    // Keras' fans for a convolution: the receptive field times the input or output channels.
    const std::int64_t fan_in = kernel_size_ * channels_, fan_out = kernel_size_ * keys_.filters;
    const std::uint64_t base = ctx.key();
    add_variable(ctx, "kernel", kernel, [&] { return initialize(keys_.kernel_init, kernel, fan_in, fan_out, base); });
    if (keys_.use_bias)
      add_variable(ctx, "bias", bias,
                   [&] { return initialize(keys_.bias_init, bias, fan_in, fan_out, mix64(base + 1)); });
    return Shape{out_steps_, keys_.filters};
  }

  Output call(Graph& g, Output x, bool) override {
    if (dilation_ > 1) return call_dilated(g, x);
    if (causal()) {
      const Output flat = g.add("Reshape", {x}, Attrs{{"shape", std::vector<std::int64_t>{steps_ * channels_}}});
      x = g.add("PadLastAxis", {flat},
                Attrs{{"begin", padded() * channels_}, {"width", (steps_ + padded()) * channels_}});
    }
    const Output image =
        g.add("Reshape", {x}, Attrs{{"shape", std::vector<std::int64_t>{steps_ + padded(), 1, channels_}}});
    const Output kernel =
        g.add("Reshape", {read(g, 0)}, Attrs{{"shape", std::vector<std::int64_t>{1, channels_, keys_.filters}}});
    Attrs attrs = detail::window_attrs({strides_, 1}, causal() ? "valid" : padding_);
    const Output y =
        keys_.use_bias
            ? add_fused_with_bias(g, "FusedConv2D", {image, kernel, read(g, 1)}, std::move(attrs), keys_.activation)
            : apply_activation(g, g.add("Conv2D", {image, kernel}, std::move(attrs)), keys_.activation);
    return g.add("Reshape", {y}, Attrs{{"shape", std::vector<std::int64_t>{out_steps_, keys_.filters}}});
  }

  // The 2-D form: Reshape to [N, steps, 1, C], Conv between Transposes to NCHW and back, Reshape, activation.
  std::string to_onnx(OnnxWriter& w, const std::string& x) const override {
    if (dilation_ > 1) return dilated_to_onnx(w, x);
    const std::vector<float> oihw =
        detail::onnx_conv_kernel(value("kernel").to_floats(), kernel_size_, 1, channels_, keys_.filters);
    std::string in = x;
    if (causal())  // zero steps in front: ONNX's Pad on [N, steps, channels]
      in = w.op("Pad", name(), {x, w.int_initializer(name() + "/pads", {0, padded(), 0, 0, 0, 0})});
    const std::string image =
        w.op("Reshape", name(), {in, w.int_initializer(name() + "/image", {0, steps_ + padded(), 1, channels_})});
    std::vector<std::string> inputs{
        onnx_to_nchw(w, name(), image),
        w.initializer(variable_name("kernel"), {keys_.filters, channels_, kernel_size_, 1}, oihw)};
    if (keys_.use_bias) inputs.push_back(w.weight(variable_name("bias"), value("bias")));
    const std::string y =
        w.op("Conv", name(), inputs,
             {OnnxAttr::ints("kernel_shape", {kernel_size_, 1}), OnnxAttr::ints("strides", {strides_, 1}),
              OnnxAttr::text("auto_pad", detail::onnx_auto_pad(causal() ? "valid" : padding_))});
    const std::string steps =
        w.op("Reshape", name(),
             {onnx_to_nhwc(w, name(), y), w.int_initializer(name() + "/steps", {0, out_steps_, keys_.filters})});
    return activation_to_onnx(w, name(), keys_.activation, steps);
  }

  nlohmann::json config() const override {
    nlohmann::json c = keys_.with({{"kernel_size", kernel_size_}, {"strides", strides_}, {"padding", padding_}});
    if (dilation_ > 1) c["dilation_rate"] = dilation_;
    return c;
  }

 private:
  bool causal() const { return padding_ == "causal"; }
  // The steps a window covers: kernel_size taps dilation_rate apart.
  std::int64_t span() const { return (kernel_size_ - 1) * dilation_ + 1; }
  // The zero steps in front of a causal convolution's input.
  std::int64_t padded() const { return causal() ? span() - 1 : 0; }

  // The dilated convolution's input, padded: `front` zero steps, then the input, then zeros up to `rows`
  // times d steps, of which the undilated convolution gives rows - kernel_size + 1 times d outputs.
  struct DilatedPlan {
    std::int64_t front = 0, rows = 0, out_rows = 0;
  };
  DilatedPlan dilated_plan() const {
    DilatedPlan p;
    // TF's "same" puts the odd zero after; "causal" puts them all in front.
    p.front = padding_ == "same" ? (span() - 1) / 2 : padded();
    const std::int64_t needed = out_steps_ + span() - 1;
    p.rows = (needed + dilation_ - 1) / dilation_;
    p.out_rows = p.rows - kernel_size_ + 1;
    return p;
  }

  Output call_dilated(Graph& g, Output x) {
    const DilatedPlan p = dilated_plan();
    auto reshape = [&](Output v, std::vector<std::int64_t> dims) {
      return g.add("Reshape", {v}, Attrs{{"shape", std::move(dims)}});
    };
    const Output flat = g.add("PadLastAxis", {reshape(x, {steps_ * channels_})},
                              Attrs{{"begin", p.front * channels_}, {"width", p.rows * dilation_ * channels_}});
    const Output image = reshape(flat, {p.rows, dilation_, channels_});
    const Output kernel = reshape(read(g, 0), {1, channels_, keys_.filters});
    Attrs attrs = detail::window_attrs({1, 1}, "valid");
    const Output y =
        keys_.use_bias
            ? add_fused_with_bias(g, "FusedConv2D", {image, kernel, read(g, 1)}, std::move(attrs), keys_.activation)
            : apply_activation(g, g.add("Conv2D", {image, kernel}, std::move(attrs)), keys_.activation);
    const Output steps = g.add("SliceLastAxis", {reshape(y, {p.out_rows * dilation_ * keys_.filters})},
                               Attrs{{"begin", std::int64_t{0}}, {"size", out_steps_ * keys_.filters}});
    return reshape(steps, {out_steps_, keys_.filters});
  }

  // The same steps in ONNX: Pad, Reshape to [N, rows, d, C], Conv between Transposes, Reshape, Slice.
  std::string dilated_to_onnx(OnnxWriter& w, const std::string& x) const {
    const DilatedPlan p = dilated_plan();
    const std::int64_t after = p.rows * dilation_ - p.front - steps_;
    const std::string padded_x =
        w.op("Pad", name(), {x, w.int_initializer(name() + "/pads", {0, p.front, 0, 0, after, 0})});
    const std::string image =
        w.op("Reshape", name(), {padded_x, w.int_initializer(name() + "/image", {0, p.rows, dilation_, channels_})});
    std::vector<std::string> inputs{onnx_to_nchw(w, name(), image),
                                    w.initializer(variable_name("kernel"), {keys_.filters, channels_, kernel_size_, 1},
                                                  detail::onnx_conv_kernel(value("kernel").to_floats(), kernel_size_, 1,
                                                                           channels_, keys_.filters))};
    if (keys_.use_bias) inputs.push_back(w.weight(variable_name("bias"), value("bias")));
    const std::string y =
        w.op("Conv", name(), inputs,
             {OnnxAttr::ints("kernel_shape", {kernel_size_, 1}), OnnxAttr::text("auto_pad", "VALID")});
    const std::string all = w.op(
        "Reshape", name(),
        {onnx_to_nhwc(w, name(), y), w.int_initializer(name() + "/steps", {0, p.out_rows * dilation_, keys_.filters})});
    const std::string steps =
        w.op("Slice", name(),
             {all, w.int_initializer(name() + "/starts", {0}), w.int_initializer(name() + "/ends", {out_steps_}),
              w.int_initializer(name() + "/axes", {1})});
    return activation_to_onnx(w, name(), keys_.activation, steps);
  }

  detail::ConvKeys keys_;
  std::int64_t kernel_size_ = 1, strides_ = 1, dilation_ = 1;
  std::string padding_;
  std::int64_t steps_ = 0, channels_ = 0, out_steps_ = 0;
};

}  // namespace

std::unique_ptr<Layer> make_conv1d(LayerArgs& args) { return std::make_unique<Conv1D>(args); }

void keras_conv1d(KerasConfig& c, nlohmann::json& out, KerasLayerWalk&) {
  detail::ConvKeys::from_keras(c, out);
  out["kernel_size"] = c.int_single("kernel_size").value_or(1);
  out["strides"] = c.int_single("strides").value_or(1);
  out["padding"] = c.one_of("padding", {"valid", "same", "causal"}, "valid");
  if (const std::int64_t d = c.int_single("dilation_rate").value_or(1); d != 1) out["dilation_rate"] = d;
}

}  // namespace tctl
