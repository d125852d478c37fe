// TokenAndPositionEmbedding (KerasHub's): the sum of a token embedding, row id of a [vocabulary_size,
// embedding_dim] table for each id, and a learned position embedding, row l of a [sequence_length,
// embedding_dim] table at step l. Input: [steps] token ids (steps <= sequence_length), whole numbers in
// [0, vocabulary_size); output [steps, embedding_dim]. Both tables start from Keras' "uniform".
#include <fmt/format.h>

#include "core/counter_random.h"
#include "models/nn/initializers.h"
#include "models/nn/layer.h"

namespace tctl {
namespace {

class TokenAndPositionEmbedding final : public Layer {
 public:
  explicit TokenAndPositionEmbedding(LayerArgs& args) : Layer("TokenAndPositionEmbedding", args.name, args.device) {
    vocabulary_ = args.spec.positive_int("vocabulary_size");
    sequence_length_ = args.spec.positive_int("sequence_length");
    dim_ = args.spec.positive_int("embedding_dim");
    init_ = args.spec.one_of("embeddings_initializer", initializer_names(), "uniform");
    mask_zero_ = args.spec.boolean("mask_zero", false);
  }

  // KerasHub's sub-layers token_embedding and position_embedding, one table each (a token embedding with
  // tie_weights false would add a reverse table, which this layer does not have).
  std::vector<KerasWeight> keras_weights() const override {
    return {{"token_embedding/vars/0"}, {"position_embedding/vars/0"}};
  }

  Shape build(const Shape& input, const BuildContext& ctx, const SpecReader& where) override {
    if (input.rank() != 1)
      where.fail_here("TokenAndPositionEmbedding takes a sequence of token ids, (None, steps), got " +
                      Shape::concat(-1, input).keras_string());
    if (input[0] > sequence_length_)
      where.fail("sequence_length",
                 fmt::format("{} steps of input are more than sequence_length {}", input[0], sequence_length_));
    // Sizes past this are typos, and would otherwise surface as an allocation failure.
    constexpr std::int64_t kMaxTableElements = std::int64_t{1} << 31;
    if (dim_ > kMaxTableElements / std::max(vocabulary_, sequence_length_))
      where.fail("embedding_dim", "a table this large is larger than the 2^31 elements tensorctl supports");
    steps_ = input[0];
    const Shape tokens{vocabulary_, dim_}, positions{sequence_length_, dim_};
    const std::uint64_t base = ctx.key();
    add_variable(ctx, "token_embeddings", tokens, [&] { return initialize(init_, tokens, vocabulary_, dim_, base); });
    add_variable(ctx, "position_embeddings", positions,
                 [&] { return initialize(init_, positions, sequence_length_, dim_, mix64(base + 1)); });
    return Shape{steps_, dim_};
  }

  Output call(Graph& g, Output x, bool) override {
    return g.add("PositionEmbedding", {g.add("Embedding", {read(g, 0), x}), read(g, 1)});
  }

  // Gather on the ids cast to int64, plus the first `steps` rows of the position table.
  std::string to_onnx(OnnxWriter& w, const std::string& x) const override {
    const std::string ids = w.op("Cast", name(), {x}, {OnnxAttr::integer("to", 7)});
    const std::string tokens =
        w.op("Gather", name(), {w.weight(variable_name("token_embeddings"), value("token_embeddings")), ids},
             {OnnxAttr::integer("axis", 0)});
    std::vector<float> rows = value("position_embeddings").to_floats();
    rows.resize(static_cast<std::size_t>(steps_ * dim_));
    return w.op("Add", name(), {tokens, w.initializer(variable_name("position_embeddings"), {steps_, dim_}, rows)});
  }

  std::int64_t token_ids() const override { return vocabulary_; }
  // mask_zero: id 0 is padding, as Embedding's (Keras' masking).
  bool makes_mask() const override { return mask_zero_; }

  nlohmann::json config() const override {
    return {{"vocabulary_size", vocabulary_},
            {"sequence_length", sequence_length_},
            {"embedding_dim", dim_},
            {"embeddings_initializer", init_},
            {"mask_zero", mask_zero_}};
  }

 private:
  std::int64_t vocabulary_ = 0, sequence_length_ = 0, dim_ = 0, steps_ = 0;
  std::string init_;
  bool mask_zero_ = false;
};

}  // namespace

std::unique_ptr<Layer> make_token_and_position_embedding(LayerArgs& args) {
  return std::make_unique<TokenAndPositionEmbedding>(args);
}

void keras_token_and_position_embedding(KerasConfig& c, nlohmann::json& out, KerasLayerWalk& walk) {
  out["vocabulary_size"] = c.positive_int("vocabulary_size");
  out["sequence_length"] = c.positive_int("sequence_length");
  out["embedding_dim"] = c.positive_int("embedding_dim");
  const nlohmann::json* init = c.take("embeddings_initializer");
  if (init != nullptr && !init->is_null() && !keras_default_uniform(*init))
    c.fail("embeddings_initializer", "only Keras' default \"uniform\" (RandomUniform(-0.05, 0.05)) is supported");
  out["embeddings_initializer"] = "uniform";
  out["mask_zero"] = c.boolean("mask_zero", false);
  // tie_weights false gives KerasHub's token embedding a second table, the output projection of a language
  // model, which Keras counts and saves; a Sequential classifier never reads it, and dropping it unsaid would
  // change the parameter count.
  if (!c.boolean("tie_weights", true))
    c.fail("tie_weights", "only true is supported (false adds an output projection table this model never uses)");
  walk.rank += 1;
  walk.masked = out["mask_zero"].get<bool>();
}

}  // namespace tctl
