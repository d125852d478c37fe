// MaxPooling1D and AveragePooling1D: the maximum or the mean of each pool_size window of steps over
// [batch, steps, channels] inputs, run as the 2-D pools on the input seen as [steps, 1, channels].
#include "models/nn/layer.h"
#include "models/nn/layers/detail/window_spec.h"

namespace tctl {

namespace {

class Pooling1D final : public Layer {
 public:
  Pooling1D(LayerArgs& args, std::string type, std::string op)
      : Layer(std::move(type), args.name, args.device), op_(std::move(op)) {
    pool_size_ = detail::positive_int_single(args.spec, "pool_size", 2);
    // Keras writes strides null for "the pool size".
    if (args.spec.has("strides") && args.spec.raw("strides").is_null())
      strides_ = pool_size_;
    else
      strides_ = detail::positive_int_single(args.spec, "strides", pool_size_);
    padding_ = detail::read_padding(args.spec);
  }

  Shape build(const Shape& input, const BuildContext&, const SpecReader& where) override {
    if (input.rank() != 2)
      where.fail_here(type() + " expects an input of shape (None, steps, channels), got " +
                      Shape::concat(-1, input).keras_string());
    steps_ = input[0];
    channels_ = input[1];
    out_steps_ = detail::window_output_1d(steps_, pool_size_, strides_, padding_, where, "pool_size");
    return Shape{out_steps_, channels_};
  }

  Output call(Graph& g, Output x, bool) override {
    const Output image = g.add("Reshape", {x}, Attrs{{"shape", std::vector<std::int64_t>{steps_, 1, channels_}}});
    Attrs attrs = detail::window_attrs({strides_, 1}, padding_);
    attrs.set("window", std::vector<std::int64_t>{pool_size_, 1});
    const Output y = g.add(op_, {image}, std::move(attrs));
    return g.add("Reshape", {y}, Attrs{{"shape", std::vector<std::int64_t>{out_steps_, channels_}}});
  }

  // The 2-D form: Reshape to [N, steps, 1, C], the pool between Transposes to NCHW and back, Reshape.
  std::string to_onnx(OnnxWriter& w, const std::string& x) const override {
    const bool max = type() == "MaxPooling1D";
    std::vector<OnnxAttr> attrs{OnnxAttr::ints("kernel_shape", {pool_size_, 1}),
                                OnnxAttr::ints("strides", {strides_, 1}),
                                OnnxAttr::text("auto_pad", detail::onnx_auto_pad(padding_))};
    if (!max) attrs.push_back(OnnxAttr::integer("count_include_pad", 0));
    const std::string image =
        w.op("Reshape", name(), {x, w.int_initializer(name() + "/image", {0, steps_, 1, channels_})});
    const std::string y = w.op(max ? "MaxPool" : "AveragePool", name(), {onnx_to_nchw(w, name(), image)}, attrs);
    return w.op("Reshape", name(),
                {onnx_to_nhwc(w, name(), y), w.int_initializer(name() + "/steps", {0, out_steps_, channels_})});
  }

  nlohmann::json config() const override {
    return {{"pool_size", pool_size_}, {"strides", strides_}, {"padding", padding_}};
  }

 private:
  std::string op_;
  std::int64_t pool_size_ = 2, strides_ = 2;
  std::string padding_;
  std::int64_t steps_ = 0, channels_ = 0, out_steps_ = 0;
};

}  // namespace

std::unique_ptr<Layer> make_max_pooling1d(LayerArgs& args) {
  return std::make_unique<Pooling1D>(args, "MaxPooling1D", "MaxPool2D");
}
std::unique_ptr<Layer> make_average_pooling1d(LayerArgs& args) {
  return std::make_unique<Pooling1D>(args, "AveragePooling1D", "AvgPool2D");
}

void keras_pooling1d(KerasConfig& c, nlohmann::json& out, KerasLayerWalk&) {
  const std::int64_t pool = c.int_single("pool_size").value_or(2);
  out["pool_size"] = pool;
  // Keras' strides default (None) is the pool size.
  out["strides"] = c.int_single("strides").value_or(pool);
  out["padding"] = c.one_of("padding", {"valid", "same"}, "valid");
  c.require_channels_last();
}

}  // namespace tctl
