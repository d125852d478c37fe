// GlobalAveragePooling1D/2D and GlobalMaxPooling1D/2D: the mean or the maximum of each channel over the
// steps of a [batch, steps, channels] input (1D) or the pixels of a [batch, height, width, channels] one
// (2D), giving [batch, channels], or with keepdims the input's rank with each pooled axis of size 1 (Keras 3).
// The four read the same keys, so one class serves them; a 2-D input is pooled as the steps of a reshape.
#include <fmt/format.h>

#include <limits>

#include "models/nn/layer.h"

namespace tctl {
namespace {

class GlobalPooling final : public Layer {
 public:
  GlobalPooling(LayerArgs& args, std::string type, bool max, int spatial_rank)
      : Layer(std::move(type), args.name, args.device), max_(max), spatial_rank_(spatial_rank) {
    keepdims_ = args.spec.boolean("keepdims", false);
  }

  Shape build(const Shape& input, const BuildContext&, const SpecReader& where) override {
    if (input.rank() != spatial_rank_ + 1)
      where.fail_here(fmt::format("{} takes inputs of {} dimensions besides the batch ({}), got {}", type(),
                                  spatial_rank_ + 1, spatial_rank_ == 1 ? "steps, channels" : "height, width, channels",
                                  input.to_string()));
    steps_ = 1;
    for (int a = 0; a < spatial_rank_; ++a) steps_ *= input[a];
    channels_ = input[spatial_rank_];
    if (!keepdims_) return Shape{channels_};
    return spatial_rank_ == 1 ? Shape{1, channels_} : Shape{1, 1, channels_};
  }

  // Over the steps a mask keeps, for the 1-D poolings (Keras' masking; the 2-D ones have no steps). Keras 3's
  // GlobalMaxPooling1D takes no mask: it pools the padding steps too and the mask ends there, which the key
  // ignore_mask of every layer does (import-keras sets it).
  MaskUse mask_use() const override { return spatial_rank_ == 1 ? MaskUse::kConsumes : MaskUse::kRefuses; }
  Output call_masked(Graph& g, Output x, Output mask, bool) override {
    Output y = g.add(max_ ? "GlobalMaxPool" : "GlobalAvgPool", {x, mask});
    return keepdims_ ? g.add("Reshape", {y}, Attrs{{"shape", std::vector<std::int64_t>{1, channels_}}}) : y;
  }

  Output call(Graph& g, Output x, bool) override {
    if (spatial_rank_ != 1) x = g.add("Reshape", {x}, Attrs{{"shape", std::vector<std::int64_t>{steps_, channels_}}});
    Output y = g.add(max_ ? "GlobalMaxPool" : "GlobalAvgPool", {x});
    if (!keepdims_) return y;
    std::vector<std::int64_t> kept(static_cast<std::size_t>(spatial_rank_), 1);
    kept.push_back(channels_);
    return g.add("Reshape", {y}, Attrs{{"shape", kept}});
  }

  // ReduceMean or ReduceMax over the steps of the [batch, steps, channels] reshape.
  std::string to_onnx(OnnxWriter& w, const std::string& x) const override {
    const std::string steps =
        w.op("Reshape", name(), {x, w.int_initializer(name() + "/steps", {0, steps_, channels_})});
    const std::string y = w.op(max_ ? "ReduceMax" : "ReduceMean", name(), {steps},
                               {OnnxAttr::ints("axes", {1}), OnnxAttr::integer("keepdims", 0)});
    if (!keepdims_) return y;
    std::vector<std::int64_t> kept{0};
    kept.insert(kept.end(), static_cast<std::size_t>(spatial_rank_), 1);
    kept.push_back(channels_);
    return w.op("Reshape", name(), {y, w.int_initializer(name() + "/shape", kept)});
  }

  // Over the kept steps, as GlobalAvgPool and GlobalMaxPool with a mask: the sum of x m over the count of
  // kept steps (at least 1, so a row of padding only gives zeros), or the maximum with padding at the lowest
  // float, zeros where no step is kept.
  std::string to_onnx_masked(OnnxWriter& w, const std::string& x, const std::string& mask) const override {
    const std::string& n = name();
    const std::string m = w.op("Unsqueeze", n, {mask, w.int_initializer(n + "/channel_axis", {2})});  // [N, T, 1]
    const std::string count = w.op("ReduceSum", n, {m, w.int_initializer(n + "/steps_axis", {1})},
                                   {OnnxAttr::integer("keepdims", 0)});  // [N, 1]
    std::string y;
    if (!max_) {
      const std::string sum = w.op("ReduceSum", n, {w.op("Mul", n, {x, m}), w.int_initializer(n + "/sum_axis", {1})},
                                   {OnnxAttr::integer("keepdims", 0)});
      y = w.op("Div", n, {sum, w.op("Max", n, {count, w.initializer(n + "/one", {}, {1.0f})})});
    } else {
      const std::string lowest = w.initializer(n + "/lowest", {}, {std::numeric_limits<float>::lowest()});
      const std::string kept = w.op("Cast", n, {m}, {OnnxAttr::integer("to", 9)});  // TensorProto BOOL
      const std::string top = w.op("ReduceMax", n, {w.op("Where", n, {kept, x, lowest})},
                                   {OnnxAttr::ints("axes", {1}), OnnxAttr::integer("keepdims", 0)});
      y = w.op("Mul", n, {top, w.op("Min", n, {count, w.initializer(n + "/one", {}, {1.0f})})});
    }
    if (!keepdims_) return y;
    return w.op("Reshape", n, {y, w.int_initializer(n + "/shape", {0, 1, channels_})});
  }

  nlohmann::json config() const override { return {{"keepdims", keepdims_}}; }

 private:
  bool max_ = false;
  int spatial_rank_ = 1;
  bool keepdims_ = false;
  std::int64_t steps_ = 0, channels_ = 0;
};

}  // namespace

std::unique_ptr<Layer> make_global_average_pooling1d(LayerArgs& args) {
  return std::make_unique<GlobalPooling>(args, "GlobalAveragePooling1D", false, 1);
}
std::unique_ptr<Layer> make_global_average_pooling2d(LayerArgs& args) {
  return std::make_unique<GlobalPooling>(args, "GlobalAveragePooling2D", false, 2);
}
std::unique_ptr<Layer> make_global_max_pooling1d(LayerArgs& args) {
  return std::make_unique<GlobalPooling>(args, "GlobalMaxPooling1D", true, 1);
}
std::unique_ptr<Layer> make_global_max_pooling2d(LayerArgs& args) {
  return std::make_unique<GlobalPooling>(args, "GlobalMaxPooling2D", true, 2);
}

// Keras 3's GlobalMaxPooling1D and the 2-D poolings take no mask: keras_to_spec ends one reaching them.
void keras_global_pooling(KerasConfig& c, nlohmann::json& out, KerasLayerWalk& walk) {
  c.require_channels_last();
  out["keepdims"] = c.boolean("keepdims", false);
  if (!out["keepdims"].get<bool>()) walk.rank = 1;
}

// GlobalAveragePooling1D averages over the steps a mask keeps, and the mask ends there.
void keras_global_average_pooling1d(KerasConfig& c, nlohmann::json& out, KerasLayerWalk& walk) {
  keras_global_pooling(c, out, walk);
  walk.take_mask(false);
}

}  // namespace tctl
