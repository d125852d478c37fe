// MaxPooling2D and AveragePooling2D: the maximum or the mean of each pool_size window over
// [batch, height, width, channels] inputs. Both read the same keys, so one class serves both types.
#include "models/nn/layer.h"
#include "models/nn/layers/detail/window_spec.h"

namespace tctl {
namespace {

class Pooling2D final : public Layer {
 public:
  Pooling2D(LayerArgs& args, std::string type, std::string op)
      : Layer(type, args.name, args.device), op_(std::move(op)) {
    pool_size_ = detail::positive_int_pair(args.spec, "pool_size", {2, 2});
    // Keras writes strides null for "the pool size".
    if (args.spec.has("strides") && args.spec.raw("strides").is_null())
      strides_ = pool_size_;
    else
      strides_ = detail::positive_int_pair(args.spec, "strides", pool_size_);
    padding_ = detail::read_padding(args.spec);
  }

  Shape build(const Shape& input, const BuildContext&, const SpecReader& where) override {
    detail::expect_image_input(input, type(), where);
    const detail::Pair out = detail::window_output(input, pool_size_, strides_, padding_, where, "pool_size");
    return Shape{out[0], out[1], input[2]};
  }

  Output call(Graph& g, Output x, bool) override {
    Attrs attrs = detail::window_attrs(strides_, padding_);
    attrs.set("window", std::vector<std::int64_t>{pool_size_[0], pool_size_[1]});
    return g.add(op_, {x}, std::move(attrs));
  }

  // MaxPool or AveragePool (padding not counted, as our kernel) between Transposes to NCHW and back.
  std::string to_onnx(OnnxWriter& w, const std::string& x) const override {
    const bool max = type() == "MaxPooling2D";
    std::vector<OnnxAttr> attrs{OnnxAttr::ints("kernel_shape", {pool_size_[0], pool_size_[1]}),
                                OnnxAttr::ints("strides", {strides_[0], strides_[1]}),
                                OnnxAttr::text("auto_pad", detail::onnx_auto_pad(padding_))};
    if (!max) attrs.push_back(OnnxAttr::integer("count_include_pad", 0));
    const std::string nchw = onnx_to_nchw(w, name(), x);
    return onnx_to_nhwc(w, name(), w.op(max ? "MaxPool" : "AveragePool", name(), {nchw}, attrs));
  }

  nlohmann::json config() const override {
    return {
        {"pool_size", detail::pair_json(pool_size_)}, {"strides", detail::pair_json(strides_)}, {"padding", padding_}};
  }

 private:
  std::string op_;
  detail::Pair pool_size_{}, strides_{};
  std::string padding_;
};

}  // namespace

std::unique_ptr<Layer> make_max_pooling2d(LayerArgs& args) {
  return std::make_unique<Pooling2D>(args, "MaxPooling2D", "MaxPool2D");
}
std::unique_ptr<Layer> make_average_pooling2d(LayerArgs& args) {
  return std::make_unique<Pooling2D>(args, "AveragePooling2D", "AvgPool2D");
}

void keras_pooling2d(KerasConfig& c, nlohmann::json& out, KerasLayerWalk&) {
  const nlohmann::json pool = c.int_pair("pool_size").value_or(nlohmann::json::array({2, 2}));
  out["pool_size"] = pool;
  // Keras' strides default (None) is the pool size.
  out["strides"] = c.int_pair("strides").value_or(pool);
  out["padding"] = c.one_of("padding", {"valid", "same"}, "valid");
  c.require_channels_last();
}

}  // namespace tctl
