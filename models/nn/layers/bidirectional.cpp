// Bidirectional: a recurrent layer (SimpleRNN, LSTM or GRU) run forwards and a copy of it run backwards over
// the same sequence, their outputs merged by merge_mode: concat (Keras' default) on the last axis, sum, ave
// or mul. With return_sequences the backward layer's outputs are put back in input order first, so step t of
// the merge holds both directions' outputs at input step t, as in Keras.
//
//   {"type": "Bidirectional", "layer": {"type": "LSTM", "units": 64}, "merge_mode": "concat"}
//
// The two layers are named "forward_<name>" and "backward_<name>" after the wrapped layer's name, as Keras
// names them, and their variables "<bidirectional>/forward_lstm/kernel", ...: the forward layer's first. An
// unnamed wrapped layer takes its automatic name from the model's scope, as in Keras, where it is made before
// its wrapper: [Bidirectional(LSTM), LSTM] names the wrapped one lstm and the next lstm_1.
#include <string_view>

#include "models/nn/layers/detail/recurrent.h"

namespace tctl {
namespace {

// The prefixes of the two layers' names.
constexpr std::string_view kForward = "forward_", kBackward = "backward_";

bool is_recurrent_type(const nlohmann::json& spec) {
  const std::string type = spec.is_object() ? spec.value("type", "") : "";
  return type == "SimpleRNN" || type == "LSTM" || type == "GRU";
}

class Bidirectional final : public Layer {
 public:
  explicit Bidirectional(LayerArgs& args) : Layer("Bidirectional", args.name, args.device), file_(args.spec.file()) {
    const nlohmann::json& inner = args.spec.raw("layer");
    path_ = args.spec.path_of("layer");
    if (!is_recurrent_type(inner))
      throw SpecError(file_, path_, "Bidirectional wraps a SimpleRNN, LSTM or GRU layer, got " + describe_json(inner));
    merge_ = args.spec.one_of("merge_mode", {"concat", "sum", "ave", "mul"}, "concat");
    LayerNamer own;
    LayerNamer& namer = args.namer != nullptr ? *args.namer : own;
    const std::string inner_name = namer.next(inner);  // the wrapped layer's own name where it has one
    for (const std::string_view direction : {kForward, kBackward}) {
      nlohmann::json spec = inner;
      spec["name"] = std::string(direction) + inner_name;
      SpecReader reader(spec, file_, path_);
      auto layer = make_layer(reader, "");
      directions_.emplace_back(static_cast<detail::RecurrentLayer*>(layer.release()));
    }
    directions_[1]->set_go_backwards(!directions_[0]->go_backwards());
    for (auto& d : directions_) d->set_zero_output_for_mask(d->return_sequences());
  }

  // Keras' attributes forward_layer and backward_layer, each a recurrent layer with its cell.
  std::vector<KerasWeight> keras_weights() const override {
    std::vector<KerasWeight> out;
    for (int i = 0; i < 2; ++i)
      for (KerasWeight w : directions_[static_cast<std::size_t>(i)]->keras_weights()) {
        w.path = (i == 0 ? "forward_layer/" : "backward_layer/") + w.path;
        out.push_back(w);
      }
    return out;
  }

  Shape build(const Shape& input, const BuildContext& ctx, const SpecReader& where) override {
    const std::uint64_t base = ctx.key(0x42696469ull);
    static const nlohmann::json kNoKeys = nlohmann::json::object();
    Shape out;
    inner_elements_ = 0;
    for (int i = 0; i < 2; ++i) {
      detail::RecurrentLayer& layer = *directions_[static_cast<std::size_t>(i)];
      layer.set_variable_prefix(variable_prefix() + name() + "/");
      layer.set_locking_mode(locking_mode());
      SpecReader reader(kNoKeys, file_, path_);
      out = layer.build(input, BuildContext{base, i, ctx.budget}, reader);
      inner_elements_ += out.num_elements() + layer.inner_activation_elements();
      adopt_variables(layer);
    }
    if (merge_ != "concat") return out;
    Shape doubled = out;
    doubled.set_dim(out.rank() - 1, 2 * out[out.rank() - 1]);
    return doubled;
  }

  Output call(Graph& g, Output x, bool training) override { return call_masked(g, x, Output{}, training); }
  MaskUse mask_use() const override { return directions_[0]->mask_use(); }

  Output call_masked(Graph& g, Output x, Output mask, bool training) override {
    const bool sequences = directions_[0]->return_sequences();
    const Output forward = directions_[0]->call_in_time(g, x, mask, training, false);
    const Output backward = directions_[1]->call_in_time(g, x, mask, training, sequences);
    if (merge_ == "concat") return g.add("Concat", {forward, backward});
    if (merge_ == "mul") return g.add("Mul", {forward, backward});
    const Output sum = g.add("Add", {forward, backward});
    return merge_ == "sum" ? sum : g.add("Scale", {sum}, Attrs{{"factor", 0.5}});
  }

  std::string to_onnx(OnnxWriter& w, const std::string& x) const override { return to_onnx_masked(w, x, ""); }

  std::string to_onnx_masked(OnnxWriter& w, const std::string& x, const std::string& mask) const override {
    const bool sequences = directions_[0]->return_sequences();
    const std::string forward = directions_[0]->onnx_in_time(w, x, false, mask);
    const std::string backward = directions_[1]->onnx_in_time(w, x, sequences, mask);
    if (merge_ == "concat") return w.op("Concat", name(), {forward, backward}, {OnnxAttr::integer("axis", -1)});
    if (merge_ == "mul") return w.op("Mul", name(), {forward, backward});
    const std::string sum = w.op("Add", name(), {forward, backward});
    if (merge_ == "sum") return sum;
    return w.op("Mul", name(), {sum, w.initializer(name() + "/half", {}, {0.5f})});
  }

  std::int64_t inner_activation_elements() const override { return inner_elements_; }

  nlohmann::json config() const override {
    nlohmann::json inner = directions_[0]->to_json();
    const std::string forward_name = inner.at("name").get<std::string>();
    inner["name"] = forward_name.substr(kForward.size());
    inner.erase("zero_output_for_mask");  // Bidirectional sets it
    return {{"layer", inner}, {"merge_mode", merge_}};
  }

 private:
  std::string file_, path_, merge_;
  std::vector<std::unique_ptr<detail::RecurrentLayer>> directions_;
  std::int64_t inner_elements_ = 0;
};

}  // namespace

std::unique_ptr<Layer> make_bidirectional(LayerArgs& args) { return std::make_unique<Bidirectional>(args); }

// Keras' "layer" is the wrapped layer's object; its "backward_layer", which Keras writes too, must be that
// layer's mirror (the same keys but name and go_backwards).
void keras_bidirectional(KerasConfig& c, nlohmann::json& out, KerasLayerWalk& walk) {
  out["merge_mode"] = c.one_of("merge_mode", {"concat", "sum", "ave", "mul"}, "concat");
  const nlohmann::json* layer = c.take("layer");
  if (layer == nullptr || !layer->is_object()) c.fail("layer", "expected the wrapped layer's object");
  const std::string cls = layer->value("class_name", "");
  if (cls != "SimpleRNN" && cls != "LSTM" && cls != "GRU")
    c.fail("layer", "Bidirectional wraps a SimpleRNN, LSTM or GRU layer, got " + (cls.empty() ? "no class" : cls));
  static const nlohmann::json kEmpty = nlohmann::json::object();
  const nlohmann::json& config = layer->contains("config") ? layer->at("config") : kEmpty;
  KerasConfig inner(config, c.file(), c.path_of("layer") + ".config", cls + " layer inside Bidirectional");
  nlohmann::json spec = {{"type", cls}};
  // Later Keras 3 releases save the forward copy as "layer", named forward_lstm, and take the prefix off when
  // they load the file (Bidirectional's constructor names the copy "forward_" + the name without it): the
  // wrapped layer is lstm either way, as in an earlier release's file.
  if (std::string n = inner.common(); !n.empty())
    spec["name"] = n.starts_with(kForward) ? n.substr(kForward.size()) : n;
  detail::keras_recurrent(inner, spec, walk, cls);
  inner.finish();
  spec.erase("zero_output_for_mask");  // Bidirectional sets it, as Keras does
  if (const nlohmann::json* backward = c.take("backward_layer"); backward != nullptr && !backward->is_null()) {
    auto mirror = [](nlohmann::json v) {
      v.erase("name");
      v.erase("go_backwards");
      return v;
    };
    const nlohmann::json& b = backward->contains("config") ? backward->at("config") : kEmpty;
    if (backward->value("class_name", "") != cls || mirror(b) != mirror(config))
      c.fail("backward_layer", "a backward layer other than the wrapped layer run backwards is not supported");
  }
  out["layer"] = spec;
}

}  // namespace tctl
