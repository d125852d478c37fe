// Embedding: token ids to vectors, row id of an [input_dim, output_dim] table for each id of the input
// (any shape: [steps] for a sequence), giving the input's shape plus output_dim. The ids are whole numbers
// in [0, input_dim) held as floats, as a CSV's features are; another value fails the step naming it. With
// mask_zero, id 0 is padding: the Sequential hands the layers after a mask of the other ids (Keras' masking),
// which the recurrent layers and the global poolings honour and other layers refuse.
#include <fmt/format.h>

#include "models/nn/initializers.h"
#include "models/nn/layer.h"

namespace tctl {
namespace {

class Embedding final : public Layer {
 public:
  explicit Embedding(LayerArgs& args) : Layer("Embedding", args.name, args.device) {
    input_dim_ = args.spec.positive_int("input_dim");
    output_dim_ = args.spec.positive_int("output_dim");
    init_ = args.spec.one_of("embeddings_initializer", initializer_names(), "uniform");
    mask_zero_ = args.spec.boolean("mask_zero", false);
  }

  Shape build(const Shape& input, const BuildContext& ctx, const SpecReader& where) override {
    if (input.rank() < 1)
      where.fail_here("Embedding takes ids with at least one dimension besides the batch (steps), got a scalar");
    if (mask_zero_ && input.rank() != 1)
      where.fail("mask_zero", "a mask is over the steps of a sequence of ids (None, steps), not " +
                                  Shape::concat(-1, input).keras_string());
    // Sizes past this are typos, and would otherwise surface as an allocation failure.
    constexpr std::int64_t kMaxTableElements = std::int64_t{1} << 31;
    if (output_dim_ > kMaxTableElements / input_dim_)
      where.fail("output_dim", fmt::format("a table of {} x {} weights is larger than the 2^31 elements tensorctl "
                                           "supports",
                                           input_dim_, output_dim_));
    const Shape table{input_dim_, output_dim_};
    const std::uint64_t base = ctx.key();
    add_variable(ctx, "embeddings", table, [&] { return initialize(init_, table, input_dim_, output_dim_, base); });
    std::vector<std::int64_t> out(input.dims().begin(), input.dims().end());
    out.push_back(output_dim_);
    return Shape(std::span<const std::int64_t>(out));
  }

  Output call(Graph& g, Output x, bool) override { return g.add("Embedding", {read(g, 0), x}); }

  // Gather on the ids cast to int64 (ONNX's TensorProto INT64 is 7).
  std::string to_onnx(OnnxWriter& w, const std::string& x) const override {
    const std::string ids = w.op("Cast", name(), {x}, {OnnxAttr::integer("to", 7)});
    return w.op("Gather", name(), {w.weight(variable_name("embeddings"), value("embeddings")), ids},
                {OnnxAttr::integer("axis", 0)});
  }

  std::int64_t token_ids() const override { return input_dim_; }
  bool makes_mask() const override { return mask_zero_; }

  nlohmann::json config() const override {
    return {{"input_dim", input_dim_},
            {"output_dim", output_dim_},
            {"embeddings_initializer", init_},
            {"mask_zero", mask_zero_}};
  }

 private:
  std::int64_t input_dim_ = 0, output_dim_ = 0;
  std::string init_;
  bool mask_zero_ = false;
};

}  // namespace

std::unique_ptr<Layer> make_embedding(LayerArgs& args) { return std::make_unique<Embedding>(args); }

void keras_embedding(KerasConfig& c, nlohmann::json& out, KerasLayerWalk& walk) {
  out["input_dim"] = c.positive_int("input_dim");
  out["output_dim"] = c.positive_int("output_dim");
  if (const nlohmann::json* init = c.has("embeddings_initializer") ? c.take("embeddings_initializer") : nullptr;
      init != nullptr && keras_default_uniform(*init)) {
    out["embeddings_initializer"] = "uniform";
  } else {
    out["embeddings_initializer"] = c.initializer("embeddings_initializer", keras_weight_initializers(), "uniform");
  }
  out["mask_zero"] = c.boolean("mask_zero", false);
  c.take("input_length");  // Keras 2's sequence length, which the input shape already gives
  c.require_false({"sparse"});
  c.require_null({"embeddings_regularizer", "activity_regularizer", "embeddings_constraint", "lora_rank"});
  walk.rank += 1;
  walk.masked = out["mask_zero"].get<bool>();
}

}  // namespace tctl
