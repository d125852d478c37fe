// TransformerEncoder, KerasHub's block on a sequence [steps, hidden]: multi-head self-attention, then a
// two-layer feedforward network, each added back to its input (a residual) with a LayerNormalization after it
// (normalize_first false, the original transformer's) or before it (normalize_first true, GPT's).
//
//   {"type": "TransformerEncoder", "intermediate_dim": 512, "num_heads": 4}
//
// KerasHub's keys: intermediate_dim and num_heads (required; num_heads must divide the hidden width),
// dropout (0: in training, on the attention's weights as KerasHub's attention layer drops them, and after the
// attention and after the feedforward network), activation (relu), layer_norm_epsilon (1e-5), kernel_initializer
// (glorot_uniform), bias_initializer (zeros), normalize_first (false); and causal (false: a query attends to
// every key; true: only to itself and the keys before it). The queries, keys and values are one MatMul by
// their three kernels side by side, then a SelfAttention node (core/ops/attention.cpp). With a padding mask
// (an Embedding's mask_zero) the padding steps are left out of the attention and the mask goes on.
//
// Variables, in KerasHub's order, each kernel [hidden, hidden] where KerasHub's are [hidden, heads,
// head width] (the same numbers): query, key, value and attention_output kernel and bias; the two layer
// normalizations' gamma and beta; the feedforward network's intermediate kernel [hidden, intermediate_dim]
// and bias, and output kernel [intermediate_dim, hidden] and bias.
#include <cmath>
#include <limits>

#include "core/counter_random.h"
#include "core/op_registry.h"
#include "models/nn/activations.h"
#include "models/nn/initializers.h"
#include "models/nn/layer.h"

namespace tctl {
namespace {

enum Var : std::size_t {
  kQueryKernel,
  kQueryBias,
  kKeyKernel,
  kKeyBias,
  kValueKernel,
  kValueBias,
  kOutputKernel,
  kOutputBias,
  kAttentionGamma,
  kAttentionBeta,
  kFeedforwardGamma,
  kFeedforwardBeta,
  kIntermediateKernel,
  kIntermediateBias,
  kFeedforwardKernel,
  kFeedforwardBias
};

class TransformerEncoder final : public Layer {
 public:
  explicit TransformerEncoder(LayerArgs& args) : Layer("TransformerEncoder", args.name, args.device) {
    SpecReader& s = args.spec;
    intermediate_ = s.positive_int("intermediate_dim");
    heads_ = s.positive_int("num_heads");
    dropout_ = s.number_in("dropout", 0.0, 0.0, 1.0);
    activation_ = s.one_of("activation", activation_names(), "relu");
    epsilon_ = s.number_in("layer_norm_epsilon", 1e-5, 1e-30, std::numeric_limits<double>::infinity());
    kernel_init_ = s.one_of("kernel_initializer", initializer_names(), "glorot_uniform");
    bias_init_ = s.one_of("bias_initializer", initializer_names(), "zeros");
    normalize_first_ = s.boolean("normalize_first", false);
    causal_ = s.boolean("causal", false);
  }

  // KerasHub's sub-layers, by attribute name, in build()'s order of our variables: the attention's four
  // EinsumDense projections (kernels [hidden, heads, head width], the output's [heads, head width, hidden]:
  // ours hold the same elements in the same order as [hidden, hidden]), the two norms, the feedforward pair.
  std::vector<KerasWeight> keras_weights() const override {
    std::vector<KerasWeight> out;
    for (const char* dense : {"query_dense", "key_dense", "value_dense", "output_dense"})
      for (const char* v : {"/vars/0", "/vars/1"})
        out.push_back({std::string("_self_attention_layer/") + dense + v, true});
    for (const char* norm : {"_self_attention_layer_norm", "_feedforward_layer_norm"})
      for (const char* v : {"/vars/0", "/vars/1"}) out.push_back({std::string(norm) + v});
    for (const char* dense : {"_feedforward_intermediate_dense", "_feedforward_output_dense"})
      for (const char* v : {"/vars/0", "/vars/1"}) out.push_back({std::string(dense) + v});
    return out;
  }

  Shape build(const Shape& input, const BuildContext& ctx, const SpecReader& where) override {
    if (input.rank() != 2)
      where.fail_here("TransformerEncoder expects a sequence of shape (None, steps, hidden), got " +
                      Shape::concat(-1, input).keras_string());
    hidden_ = input[1];
    if (hidden_ % heads_ != 0)
      where.fail("num_heads", "num_heads " + std::to_string(heads_) + " does not divide the hidden width " +
                                  std::to_string(hidden_));
    constexpr std::int64_t kMaxKernelElements = std::int64_t{1} << 31;
    if (std::max(hidden_, intermediate_) > kMaxKernelElements / std::max(hidden_, intermediate_))
      where.fail("intermediate_dim", "kernels larger than the 2^31 elements tensorctl supports");
    const std::uint64_t base = ctx.key();
    std::uint64_t salt = 0;
    auto dense = [&](const std::string& name, std::int64_t in, std::int64_t out) {
      const Shape kernel{in, out}, bias{out};
      const std::uint64_t key = mix64(base + ++salt);
      add_variable(ctx, name + "/kernel", kernel, [&] { return initialize(kernel_init_, kernel, in, out, key); });
      add_variable(ctx, name + "/bias", bias, [&] { return initialize(bias_init_, bias, in, out, mix64(key + 1)); });
    };
    for (const char* name : {"query", "key", "value", "attention_output"}) dense(name, hidden_, hidden_);
    for (const char* name : {"self_attention_layer_norm", "feedforward_layer_norm"}) {
      const Shape shape{hidden_};
      add_variable(ctx, std::string(name) + "/gamma", shape, [&] { return Tensor::filled(shape, 1.0f); });
      add_variable(ctx, std::string(name) + "/beta", shape, [&] { return Tensor::zeros(DType::kF32, shape); });
    }
    dense("feedforward_intermediate_dense", hidden_, intermediate_);
    dense("feedforward_output_dense", intermediate_, hidden_);
    steps_ = input[0];
    if (cost_product(steps_, steps_) > kMaxTensorElements)
      where.fail_here("TransformerEncoder's attention scores of " + std::to_string(steps_) + " x " +
                      std::to_string(steps_) + " steps are more than the 2^36 elements tensorctl supports");
    if (cost_product(steps_, 11 * hidden_ + 2 * intermediate_) > kMaxTensorElements)
      where.fail("intermediate_dim",
                 "the block's activations need more than the 2^36 elements per example "
                 "tensorctl supports");
    stream_ = static_cast<std::int64_t>(ctx.key(0x44726f70ull) >> 1);
    return input;
  }

  Output call(Graph& g, Output x, bool training) override { return call_masked(g, x, Output{}, training); }
  MaskUse mask_use() const override { return MaskUse::kUsesAndPasses; }

  Output call_masked(Graph& g, Output x, Output mask, bool training) override {
    const Output attended =
        sublayer(g, x, kAttentionGamma, training, [&](Output h) { return attention(g, h, mask, training); });
    return sublayer(g, attended, kFeedforwardGamma, training, [&](Output h) {
      const Output inner = add_fused_with_bias(
          g, "FusedMatMul", {h, read(g, kIntermediateKernel), read(g, kIntermediateBias)}, {}, activation_);
      return add_fused_with_bias(g, "FusedMatMul", {inner, read(g, kFeedforwardKernel), read(g, kFeedforwardBias)}, {},
                                 "linear");
    });
  }

  std::string to_onnx(OnnxWriter& w, const std::string& x) const override { return to_onnx_masked(w, x, ""); }
  std::string to_onnx_masked(OnnxWriter& w, const std::string& x, const std::string& mask) const override;

  nlohmann::json config() const override {
    return {{"intermediate_dim", intermediate_},
            {"num_heads", heads_},
            {"dropout", dropout_},
            {"activation", activation_},
            {"layer_norm_epsilon", epsilon_},
            {"kernel_initializer", kernel_init_},
            {"bias_initializer", bias_init_},
            {"normalize_first", normalize_first_},
            {"causal", causal_}};
  }

  // The queries, keys and values, the attention's output and scores' inputs, the feedforward network's
  // intermediate activations and the residual sums and normalizations, per example.
  std::int64_t inner_activation_elements() const override {
    return cost_product(steps_, 11 * hidden_ + 2 * intermediate_);
  }

 private:
  // x + f(x) normalized after (or f applied to x normalized first), with dropout on f's output in training.
  template <class F>
  Output sublayer(Graph& g, Output x, std::size_t gamma, bool training, F f) {
    auto norm = [&](Output v) {
      return g.add("LayerNorm", {v, read(g, gamma), read(g, gamma + 1)}, Attrs{{"epsilon", epsilon_}});
    };
    Output y = f(normalize_first_ ? norm(x) : x);
    if (training && dropout_ > 0.0)
      y = g.add("Dropout", {y},
                Attrs{{"rate", dropout_}, {"stream", (stream_ + static_cast<std::int64_t>(gamma)) & kStreamMask}});
    const Output sum = g.add("Add", {x, y});
    return normalize_first_ ? sum : norm(sum);
  }

  // With dropout in training, the attention's weights are dropped too, as KerasHub's attention layer does.
  Output attention(Graph& g, Output h, Output mask, bool training) {
    const Output kernel = g.add("Concat", {read(g, kQueryKernel), read(g, kKeyKernel), read(g, kValueKernel)});
    const Output bias = g.add("Concat", {read(g, kQueryBias), read(g, kKeyBias), read(g, kValueBias)});
    const Output qkv = add_fused_with_bias(g, "FusedMatMul", {h, kernel, bias}, {}, "linear");
    std::vector<Output> inputs{qkv};
    if (mask.valid()) inputs.push_back(mask);
    Attrs attrs{{"heads", heads_}, {"causal", std::int64_t{causal_}}};
    if (training && dropout_ > 0.0) {
      attrs.set("dropout", dropout_);
      attrs.set("stream", (stream_ + kAttentionWeightsStream) & kStreamMask);
    }
    const Output heads = g.add("SelfAttention", std::move(inputs), std::move(attrs));
    return add_fused_with_bias(g, "FusedMatMul", {heads, read(g, kOutputKernel), read(g, kOutputBias)}, {}, "linear");
  }

  std::int64_t intermediate_ = 0, heads_ = 1, hidden_ = 0, steps_ = 0;
  double dropout_ = 0.0, epsilon_ = 1e-5;
  std::string activation_, kernel_init_, bias_init_;
  bool normalize_first_ = false, causal_ = false;
  // Dropout's streams, one per sublayer: the layer's key, offset by the sublayer's first variable.
  static constexpr std::int64_t kStreamMask = std::numeric_limits<std::int64_t>::max();
  // The attention weights' stream: past every sublayer's offset.
  static constexpr std::int64_t kAttentionWeightsStream = 0x100;
  std::int64_t stream_ = 0;
};

// The block unrolled into ONNX's MatMul, Softmax and LayerNormalization: the queries, keys and values split
// into heads [N, heads, T, d] by a Reshape and a Transpose, the scores Q K^T / sqrt(d) through Softmax, times
// V, the heads joined back. An excluded pair (above the diagonal when causal; a padding query or key with a
// mask) gets -1e9 added once, as in the SelfAttention kernel: 1 - allowed, allowed the product of the mask's
// query and key entries and the causal triangle, times -1e9.
std::string TransformerEncoder::to_onnx_masked(OnnxWriter& w, const std::string& x, const std::string& mask) const {
  const std::int64_t d = hidden_ / heads_;
  const std::string& n = name();
  auto weight = [&](const char* short_name) { return w.weight(variable_name(short_name), value(short_name)); };
  auto dense = [&](const std::string& v, const std::string& prefix) {
    return w.op("Add", n,
                {w.op("MatMul", n, {v, weight((prefix + "/kernel").c_str())}), weight((prefix + "/bias").c_str())});
  };
  auto norm = [&](const std::string& v, const std::string& prefix) {
    return w.op("LayerNormalization", n, {v, weight((prefix + "/gamma").c_str()), weight((prefix + "/beta").c_str())},
                {OnnxAttr::integer("axis", -1), OnnxAttr::real("epsilon", static_cast<float>(epsilon_))});
  };
  auto heads_of = [&](const std::string& v, const std::string& what) {
    const std::string split =
        w.op("Reshape", n, {v, w.int_initializer(n + "/" + what + "_split", {0, steps_, heads_, d})});
    return w.op("Transpose", n, {split}, {OnnxAttr::ints("perm", {0, 2, 1, 3})});
  };
  auto attention = [&](const std::string& v) {
    const std::string q = heads_of(dense(v, "query"), "query");
    const std::string k = heads_of(dense(v, "key"), "key");
    const std::string val = heads_of(dense(v, "value"), "value");
    const std::string kt = w.op("Transpose", n, {k}, {OnnxAttr::ints("perm", {0, 1, 3, 2})});
    std::string scores =
        w.op("Mul", n,
             {w.op("MatMul", n, {q, kt}), w.initializer(n + "/scale", {}, {1.0f / std::sqrt(static_cast<float>(d))})});
    if (causal_ || !mask.empty()) {
      std::vector<float> allowed(static_cast<std::size_t>(steps_ * steps_), 1.0f);
      for (std::int64_t i = 0; i < steps_ && causal_; ++i)
        for (std::int64_t j = i + 1; j < steps_; ++j) allowed[static_cast<std::size_t>(i * steps_ + j)] = 0.0f;
      std::string pairs = w.initializer(n + "/allowed", {steps_, steps_}, allowed);
      if (!mask.empty()) {
        const std::string queries = w.op("Unsqueeze", n, {mask, w.int_initializer(n + "/query_axes", {1, 3})});
        const std::string keys = w.op("Unsqueeze", n, {mask, w.int_initializer(n + "/key_axes", {1, 2})});
        pairs = w.op("Mul", n, {pairs, w.op("Mul", n, {queries, keys})});  // [N, 1, T, T]
      }
      const std::string excluded = w.op("Sub", n, {w.initializer(n + "/one", {}, {1.0f}), pairs});
      scores = w.op("Add", n, {scores, w.op("Mul", n, {excluded, w.initializer(n + "/excluded", {}, {-1e9f})})});
    }
    const std::string p = w.op("Softmax", n, {scores}, {OnnxAttr::integer("axis", -1)});
    const std::string joined =
        w.op("Transpose", n, {w.op("MatMul", n, {p, val})}, {OnnxAttr::ints("perm", {0, 2, 1, 3})});
    return dense(w.op("Reshape", n, {joined, w.int_initializer(n + "/join", {0, steps_, hidden_})}),
                 "attention_output");
  };
  auto feedforward = [&](const std::string& v) {
    const std::string inner = activation_to_onnx(w, n, activation_, dense(v, "feedforward_intermediate_dense"));
    return dense(inner, "feedforward_output_dense");
  };
  std::string y = x;
  for (int block = 0; block < 2; ++block) {
    const std::string prefix = block == 0 ? "self_attention_layer_norm" : "feedforward_layer_norm";
    const std::string in = normalize_first_ ? norm(y, prefix) : y;
    const std::string out = block == 0 ? attention(in) : feedforward(in);
    y = w.op("Add", n, {y, out});
    if (!normalize_first_) y = norm(y, prefix);
  }
  return y;
}

}  // namespace

std::unique_ptr<Layer> make_transformer_encoder(LayerArgs& args) { return std::make_unique<TransformerEncoder>(args); }

// KerasHub's TransformerEncoder (keras_hub.layers / keras_nlp.layers).
void keras_transformer_encoder(KerasConfig& c, nlohmann::json& out, KerasLayerWalk& walk) {
  walk.take_mask(true);  // its padding mask, passed on
  out["intermediate_dim"] = c.positive_int("intermediate_dim");
  out["num_heads"] = c.positive_int("num_heads");
  out["dropout"] = c.number("dropout", 0.0);
  out["activation"] = c.has("activation") ? c.activation("activation", false) : "relu";
  out["layer_norm_epsilon"] = c.number("layer_norm_epsilon", 1e-5);
  out["kernel_initializer"] = c.initializer("kernel_initializer", keras_weight_initializers(), "glorot_uniform");
  out["bias_initializer"] = c.initializer("bias_initializer", keras_weight_initializers(), "zeros");
  out["normalize_first"] = c.boolean("normalize_first", false);
  out["causal"] = c.boolean("causal", false);  // not KerasHub's: what tensorctl writes for its own spec
}

}  // namespace tctl
