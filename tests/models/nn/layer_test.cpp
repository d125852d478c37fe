#include "models/nn/layer.h"

#include <doctest/doctest.h>

#include <algorithm>

#include "core/text.h"
#include "spec_error_check.h"

namespace tctl {
namespace {

using nlohmann::json;

// make_layer on `text` must fail with a SpecError at `where` whose message contains `message_part`.
void expect_layer_error(const std::string& text, const std::string& where, const std::string& message_part) {
  INFO("layer: " << text);
  const json j = json::parse(text);
  SpecReader reader(j, "model.json", "layers[2]");
  testing::check_spec_error([&] { make_layer(reader, "auto"); }, "model.json", where, {message_part});
}

TEST_CASE("layer_type_names lists the registry, sorted") {
  const std::vector<std::string> names = layer_type_names();
  CHECK(names == std::vector<std::string>{"Activation",
                                          "AveragePooling1D",
                                          "AveragePooling2D",
                                          "BatchNormalization",
                                          "Bidirectional",
                                          "Conv1D",
                                          "Conv2D",
                                          "Delay",
                                          "Dense",
                                          "Dropout",
                                          "Embedding",
                                          "Flatten",
                                          "GRU",
                                          "GlobalAveragePooling1D",
                                          "GlobalAveragePooling2D",
                                          "GlobalMaxPooling1D",
                                          "GlobalMaxPooling2D",
                                          "LSTM",
                                          "LayerNormalization",
                                          "MaxPooling1D",
                                          "MaxPooling2D",
                                          "Parallel",
                                          "Rescaling",
                                          "Reshape",
                                          "SimpleRNN",
                                          "TokenAndPositionEmbedding",
                                          "TransformerEncoder"});
  CHECK(std::is_sorted(names.begin(), names.end()));
}

TEST_CASE("layer_name_stem gives the Keras stem of automatic names") {
  CHECK(layer_name_stem("Dense") == "dense");
  CHECK(layer_name_stem("Dropout") == "dropout");
  CHECK(layer_name_stem("MaxPooling2D") == "max_pooling2d");
  CHECK(layer_name_stem("BatchNormalization") == "batch_normalization");
  CHECK(layer_name_stem("LSTM") == "lstm");
  CHECK(layer_name_stem("Conv2D") == "conv2d");
}

TEST_CASE("make_layer takes the automatic name unless the spec names the layer") {
  const json unnamed = json::parse(R"({"type": "Dense", "units": 2})");
  SpecReader r1(unnamed, "model.json", "layers[0]");
  auto a = make_layer(r1, "dense_7");
  CHECK(a->name() == "dense_7");
  CHECK(a->type() == "Dense");
  CHECK(a->device().empty());
  CHECK(a->variables().empty());  // variables come with build()
  CHECK(a->param_count() == 0);
  CHECK(a->to_json().contains("device") == false);

  const json named = json::parse(R"({"type": "Dropout", "rate": 0.5, "name": "drop", "device": "cuda:1"})");
  SpecReader r2(named, "model.json", "layers[1]");
  auto b = make_layer(r2, "dropout");
  CHECK(b->name() == "drop");
  CHECK(b->device() == "cuda:1");
  CHECK(b->to_json() == json{{"type", "Dropout"}, {"name", "drop"}, {"device", "cuda:1"}, {"rate", 0.5}});
}

TEST_CASE("Layer variables are named <layer>/<variable> and counted") {
  const json spec = json::parse(R"({"type": "Dense", "units": 3, "name": "fc"})");
  SpecReader r(spec, "model.json", "layers[0]");
  auto layer = make_layer(r, "dense");
  CHECK(layer->build(Shape{5}, BuildContext{1, 0}, r) == Shape{3});
  REQUIRE(layer->variables().size() == 2);
  CHECK(layer->variables()[0]->name() == "fc/kernel");
  CHECK(layer->variables()[1]->name() == "fc/bias");
  CHECK(layer->param_count() == 18);
  CHECK(layer->variables()[0]->locking_mode() == LockingMode::kMutex);
}

TEST_CASE("make_layer errors name the JSON path") {
  expect_layer_error(R"({"type": "Dense2", "units": 3})", "layers[2].type",
                     "unknown layer type \"Dense2\" (known: " + join(layer_type_names()) + ")");
  expect_layer_error(R"({"units": 3})", "layers[2]", "missing required key \"type\"");
  expect_layer_error(R"({"type": 4})", "layers[2].type", "expected a string, got 4");
  expect_layer_error(R"({"type": "Dense", "units": 3, "name": ""})", "layers[2].name", "non-empty and contain no '/'");
  expect_layer_error(R"({"type": "Dense", "units": 3, "name": "a/b"})", "layers[2].name", "contain no '/'");
  // A NUL cut the summary table short; an escape reached the terminal.
  expect_layer_error(R"({"type": "Dense", "units": 3, "name": "x\u0000y"})", "layers[2].name",
                     "no control character, got \"x\\u0000y\"");
  expect_layer_error(R"({"type": "Dense", "units": 3, "name": "x\u001b[2J"})", "layers[2].name", "\\u001b[2J");
  expect_layer_error(R"({"type": "Dense", "units": 3, "device": "tpu"})", "layers[2].device",
                     "unknown device \"tpu\" (expected cpu, cuda, cuda:N, sim or sim:N)");
  expect_layer_error(R"({"type": "Dense", "units": 3, "device": ""})", "layers[2].device",
                     "expected a device name (cpu, cuda, cuda:N, sim or sim:N), got an empty string");
  expect_layer_error(R"({"type": "Dense", "units": 3, "device": "sim:01"})", "layers[2].device",
                     "device \"sim:01\": an index is written as plain digits");
  expect_layer_error(R"({"type": "Dense", "units": 3, "Units": 3})", "layers[2].Units", "unknown key");
}

}  // namespace
}  // namespace tctl
