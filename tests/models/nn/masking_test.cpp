// Keras' masking: an Embedding with mask_zero makes id 0 padding, and the recurrent layers and the 1-D global
// poolings after it leave the padding out. The test of that is Keras' own promise: padding a sequence, before
// or after, changes neither the model's outputs nor its gradients. Layers that would compute on the padding
// are refused when the model is built, unless their spec sets ignore_mask (Keras 3's warning and its
// dropped mask).
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/autodiff.h"
#include "core/session.h"
#include "core/thread_pool.h"
#include "models/io/onnx_export.h"
#include "models/nn/layers/layer_test_util.h"
#include "models/nn/sequential.h"
#include "spec_error_check.h"

namespace tctl {
namespace {

// The model `layers` after Embedding(12, 3, mask_zero) on sequences of `steps` ids.
Sequential model(const std::string& layers, std::int64_t steps) {
  const std::string text = R"({"input_shape": [)" + std::to_string(steps) +
                           R"(], "layers": [{"type": "Embedding", "input_dim": 12, "output_dim": 3,
                           "mask_zero": true}, )" +
                           layers + "]}";
  return Sequential::from_json(nlohmann::json::parse(text), "model.json", "", 5);
}

// The outputs on `rows` (ids), then the gradient of sum(y * w) for w = 1, 2, 3, ... with respect to every
// variable, flattened in variable order; in training mode where `training`.
std::vector<float> outputs_and_gradients(const Sequential& net, const std::vector<std::vector<float>>& rows,
                                         bool training = false) {
  auto g = std::make_shared<Graph>();
  const std::int64_t steps = static_cast<std::int64_t>(rows[0].size()), n = static_cast<std::int64_t>(rows.size());
  Output x = g->placeholder("x", DType::kF32, Shape{-1, steps});
  Output y = net.call(*g, x, training, "cpu");
  std::vector<float> weights(static_cast<std::size_t>(g->spec(y).shape[1] * n));
  for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<float>(i % 7) + 1.0f;
  Output w = g->constant(Tensor::from_floats(Shape{n, g->spec(y).shape[1]}, weights));
  Output loss = g->add("Sum", {g->add("Mul", {y, w})});
  std::vector<Output> reads;
  for (const auto& v : net.variables())
    for (const Node& node : g->nodes())
      if (node.op->name == "ReadVariable" && node.vars[0].var == v) reads.push_back(Output{node.id});
  std::vector<Output> fetches{y};
  for (Output d : gradients(*g, loss, reads)) fetches.push_back(d);
  ThreadPool inter(1), intra(2);
  Session s(g, inter, intra);
  std::vector<float> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  std::vector<Feed> feeds{{x, Tensor::from_floats(Shape{n, steps}, flat)}};
  std::vector<float> out;
  for (const Tensor& t : s.run(feeds, fetches)) {
    const std::vector<float> v = t.to_floats();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

double worst_difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(1.0, std::abs(double{b[i]})));
  return worst;
}

// `rows` with three padding ids after each, and with three before.
std::pair<std::vector<std::vector<float>>, std::vector<std::vector<float>>> padded(
    const std::vector<std::vector<float>>& rows) {
  std::vector<std::vector<float>> after, before;
  for (const auto& r : rows) {
    std::vector<float> a = r, b{0, 0, 0};
    a.insert(a.end(), {0, 0, 0});
    b.insert(b.end(), r.begin(), r.end());
    after.push_back(a);
    before.push_back(b);
  }
  return {after, before};
}

// Models after the Embedding that use its mask: every layer that honours one, in the places it can take.
std::vector<std::string> masked_models() {
  return {
      R"({"type": "LSTM", "units": 4}, {"type": "Dense", "units": 2})",
      R"({"type": "GRU", "units": 4, "go_backwards": true})",
      R"({"type": "SimpleRNN", "units": 3})",
      R"({"type": "LSTM", "units": 3, "return_sequences": true}, {"type": "Dropout", "rate": 0.5},
              {"type": "GRU", "units": 2})",
      R"({"type": "Bidirectional", "layer": {"type": "LSTM", "units": 3, "return_sequences": true}},
              {"type": "GlobalAveragePooling1D"})",
      R"({"type": "Bidirectional", "layer": {"type": "GRU", "units": 3}, "merge_mode": "sum"})",
      R"({"type": "LayerNormalization"}, {"type": "GlobalMaxPooling1D"})",
      R"({"type": "GlobalAveragePooling1D"}, {"type": "Dense", "units": 2})",
      R"({"type": "BatchNormalization"}, {"type": "GlobalAveragePooling1D"})",
      R"({"type": "Dense", "units": 4, "activation": "relu"}, {"type": "GlobalAveragePooling1D"})",
      R"({"type": "Dense", "units": 2}, {"type": "Activation", "activation": "tanh"}, {"type": "LSTM", "units": 2})",
      R"({"type": "TransformerEncoder", "intermediate_dim": 4, "num_heads": 3},
              {"type": "GlobalAveragePooling1D"})",
      R"({"type": "TransformerEncoder", "intermediate_dim": 4, "num_heads": 1, "normalize_first": true},
              {"type": "LSTM", "units": 2})",
  };
}

TEST_CASE("padding before or after a sequence changes neither the outputs nor the gradients") {
  const std::vector<std::vector<float>> plain{{3, 1, 4, 1, 5}, {9, 2, 6, 5, 3}, {5, 8, 9, 7, 9}};
  const auto [after, before] = padded(plain);
  for (const std::string& layers : masked_models()) {
    CAPTURE(layers);
    const std::vector<float> want = outputs_and_gradients(model(layers, 5), plain);
    const Sequential padded = model(layers, 8);
    CHECK(worst_difference(outputs_and_gradients(padded, after), want) <= 1e-6);
    CHECK(worst_difference(outputs_and_gradients(padded, before), want) <= 1e-6);
  }
}

TEST_CASE("BatchNormalization's training moments leave the padding out, as Keras 3's") {
  // Training normalizes with the batch's moments: were the padding steps in them, padding would move every
  // output. Rows of different lengths, padded after and before.
  const std::vector<std::vector<float>> plain{{3, 1, 4, 1, 5}, {0, 0, 6, 5, 3}, {5, 8, 9, 7, 9}};
  const auto [after, before] = padded(plain);
  for (
      const std::string layers : {
          R"({"type": "BatchNormalization"}, {"type": "GlobalAveragePooling1D"})",
          R"({"type": "Dense", "units": 4}, {"type": "BatchNormalization", "center": false}, {"type": "LSTM", "units": 2})",
      }) {
    CAPTURE(layers);
    const std::vector<float> want = outputs_and_gradients(model(layers, 5), plain, true);
    const Sequential padded = model(layers, 8);
    CHECK(worst_difference(outputs_and_gradients(padded, after, true), want) <= 1e-5);
    CHECK(worst_difference(outputs_and_gradients(padded, before, true), want) <= 1e-5);
  }
}

TEST_CASE("without mask_zero the padding counts, so the check above can fail") {
  const std::string text = R"({"input_shape": [6], "layers": [{"type": "Embedding", "input_dim": 12, "output_dim": 3},
      {"type": "LSTM", "units": 3}]})";
  const std::string short_text = R"({"input_shape": [3], "layers": [{"type": "Embedding", "input_dim": 12,
      "output_dim": 3}, {"type": "LSTM", "units": 3}]})";
  const Sequential padded = Sequential::from_json(nlohmann::json::parse(text), "m.json", "", 5);
  const Sequential plain = Sequential::from_json(nlohmann::json::parse(short_text), "m.json", "", 5);
  CHECK(worst_difference(outputs_and_gradients(padded, {{3, 1, 4, 0, 0, 0}}),
                         outputs_and_gradients(plain, {{3, 1, 4}})) > 1e-3);
}

TEST_CASE("a layer that would compute on the padding is refused, naming the embedding") {
  for (const auto& [layers, where] : std::vector<std::pair<std::string, std::string>>{
           {R"({"type": "Conv1D", "filters": 2, "kernel_size": 2})", "layers[1]"},
           {R"({"type": "LSTM", "units": 2, "return_sequences": true}, {"type": "Flatten"})", "layers[2]"}}) {
    CAPTURE(layers);
    testing::check_spec_error([&] { model(layers, 4); }, "model.json", where,
                              {"does not support masking", "embedding \"embedding\" (mask_zero)", "\"ignore_mask\""});
  }
  // Used up by a recurrent layer, the mask reaches no further.
  CHECK(model(R"({"type": "LSTM", "units": 2}, {"type": "Dense", "units": 2})", 4).output_shape() == Shape{2});
}

TEST_CASE("zero_output_for_mask without return_sequences: zeros where the last step run read padding") {
  // Keras 3 takes the last of its masked outputs: a row padded after its ids gives zeros, one padded before
  // gives the unpadded row's output; with go_backwards the last step run reads the first id.
  for (const bool backwards : {false, true}) {
    CAPTURE(backwards);
    const std::string layer =
        std::string(R"({"type": "LSTM", "units": 3, "zero_output_for_mask": true, "go_backwards": )") +
        (backwards ? "true" : "false") + "}";
    const std::vector<float> plain = outputs_and_gradients(model(layer, 3), {{3, 1, 4}});
    const Sequential padded = model(layer, 5);
    const std::vector<float> after = outputs_and_gradients(padded, {{3, 1, 4, 0, 0}});
    const std::vector<float> before = outputs_and_gradients(padded, {{0, 0, 3, 1, 4}});
    const std::vector<float>& zeroed = backwards ? before : after;
    const std::vector<float>& kept = backwards ? after : before;
    for (std::size_t j = 0; j < 3; ++j) {
      CHECK(zeroed[j] == 0.0f);
      CHECK(std::abs(kept[j] - plain[j]) <= 1e-6);
      CHECK(kept[j] != 0.0f);
    }
    // The zeroed output has no gradient: every variable's is zero.
    for (std::size_t j = 3; j < zeroed.size(); ++j) CHECK(zeroed[j] == 0.0f);
    CHECK(worst_difference(kept, plain) <= 1e-6);
  }
}

TEST_CASE("GlobalMaxPooling1D with ignore_mask pools the padding too, as Keras 3's") {
  const std::string pool = R"({"type": "GlobalMaxPooling1D", "ignore_mask": true})";
  const std::string unmasked = R"({"input_shape": [5], "layers": [{"type": "Embedding", "input_dim": 12,
      "output_dim": 3}, {"type": "GlobalMaxPooling1D"}]})";
  const Sequential plain = Sequential::from_json(nlohmann::json::parse(unmasked), "m.json", "", 5);
  // One id and padding a row, every id: the padding's row counts unless it is the least of all twelve in
  // every channel.
  std::vector<std::vector<float>> rows;
  for (int id = 1; id < 12; ++id) rows.push_back({0, static_cast<float>(id), 0, 0, 0});
  CHECK(worst_difference(outputs_and_gradients(model(pool, 5), rows), outputs_and_gradients(plain, rows)) == 0.0);
  // Without it the padding is left out, and the outputs differ.
  CHECK(worst_difference(outputs_and_gradients(model(R"({"type": "GlobalMaxPooling1D"})", 5), rows),
                         outputs_and_gradients(plain, rows)) > 1e-3);
}

TEST_CASE("ignore_mask: the layer computes on the padding and the mask ends there, as Keras 3 drops it") {
  // The same model without mask_zero: the same weights (the seed and the layers' places are the same), and
  // the padding counts in every layer.
  auto unmasked = [](const std::string& layers) {
    const std::string text = R"({"input_shape": [6], "layers": [{"type": "Embedding", "input_dim": 12,
        "output_dim": 3}, )" +
                             layers + "]}";
    return Sequential::from_json(nlohmann::json::parse(text), "m.json", "", 5);
  };
  const std::vector<std::vector<float>> rows{{3, 1, 4, 0, 0, 0}, {0, 0, 9, 2, 6, 5}};
  for (
      const std::string layers : {
          R"({"type": "Conv1D", "filters": 2, "kernel_size": 2, "ignore_mask": true}, {"type": "GlobalAveragePooling1D"})",
          R"({"type": "LSTM", "units": 2, "ignore_mask": true}, {"type": "Dense", "units": 2})",
          R"({"type": "Dense", "units": 2}, {"type": "Flatten", "ignore_mask": true})",
      }) {
    CAPTURE(layers);
    const Sequential masked = model(layers, 6);
    CHECK(worst_difference(outputs_and_gradients(masked, rows), outputs_and_gradients(unmasked(layers), rows)) == 0.0);
  }
  // A layer with ignore_mask before one that uses the mask: that one sees none.
  const std::string pool =
      R"({"type": "Dropout", "rate": 0.5, "ignore_mask": true}, {"type": "GlobalAveragePooling1D"})";
  CHECK(worst_difference(outputs_and_gradients(model(pool, 6), rows), outputs_and_gradients(unmasked(pool), rows)) ==
        0.0);
  CHECK(worst_difference(outputs_and_gradients(model(R"({"type": "GlobalAveragePooling1D"})", 6), rows),
                         outputs_and_gradients(unmasked(pool), rows)) > 1e-3);
  // The key is kept in the resolved spec, so a run's model.json builds the same model.
  CHECK(model(pool, 6).layers()[1]->to_json().at("ignore_mask") == true);
  CHECK_FALSE(model(R"({"type": "Dropout", "rate": 0.5})", 6).layers()[1]->to_json().contains("ignore_mask"));
}

TEST_CASE("a masked model's ONNX export gives predict's outputs, padding before, after and between") {
  const Tensor x = Tensor::from_floats(Shape{5, 8}, std::vector<float>{3, 1, 4, 1, 5, 0, 0, 0,  //
                                                                       0, 0, 0, 9, 2, 6, 5, 3,  //
                                                                       5, 0, 8, 9, 0, 7, 9, 0,  //
                                                                       0, 0, 0, 0, 0, 0, 0, 0,  //
                                                                       1, 2, 3, 4, 5, 6, 7, 8});
  for (const std::string& layers : masked_models()) {
    CAPTURE(layers);
    testing::detail::check_onnx_on(model(layers, 8), x);
  }
  // Every step's output: the state carried over at a padding step, or zeros with zero_output_for_mask (as
  // Bidirectional sets it).
  for (const std::string layers : {
           R"({"type": "GRU", "units": 3, "return_sequences": true})",
           R"({"type": "LSTM", "units": 2, "return_sequences": true, "go_backwards": true})",
           R"({"type": "SimpleRNN", "units": 2, "return_sequences": true, "zero_output_for_mask": true})",
           R"({"type": "GRU", "units": 2, "zero_output_for_mask": true})",
           R"({"type": "LSTM", "units": 2, "zero_output_for_mask": true, "go_backwards": true})",
           R"({"type": "GlobalMaxPooling1D", "ignore_mask": true})",
           R"({"type": "Conv1D", "filters": 2, "kernel_size": 3, "ignore_mask": true}, {"type": "GlobalMaxPooling1D"})",
           R"({"type": "Dense", "units": 2, "activation": "softmax"}, {"type": "GRU", "units": 2})",
           R"({"type": "Bidirectional", "layer": {"type": "LSTM", "units": 2, "return_sequences": true}})",
       }) {
    CAPTURE(layers);
    testing::detail::check_onnx_on(model(layers, 8), x);
  }
}

}  // namespace
}  // namespace tctl
