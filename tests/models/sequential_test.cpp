#include "models/sequential.h"

#include <doctest/doctest.h>

#include "core/errors.h"

namespace tctl {
namespace {

using nlohmann::json;

Sequential parse(const std::string& text, const std::string& path = "", std::uint64_t seed = 0) {
  return Sequential::from_json(json::parse(text), "model.json", path, seed);
}

// Parsing `text` must fail with a SpecError at `where` whose message contains `message_part`.
void expect_spec_error(const std::string& text, const std::string& where, const std::string& message_part,
                       const std::string& path = "") {
  INFO("spec: " << text);
  try {
    parse(text, path);
    FAIL("expected a SpecError at " << where);
  } catch (const SpecError& e) {
    INFO("error: " << std::string(e.what()));
    CHECK(e.file() == "model.json");
    CHECK(e.where() == where);
    CHECK(e.message().find(message_part) != std::string::npos);
  }
}

std::vector<std::string> names_of(const Sequential& net) {
  std::vector<std::string> out;
  for (const auto& l : net.layers()) out.push_back(l->name());
  return out;
}

TEST_CASE("Sequential names layers like Keras: dense, dense_1, ...") {
  Sequential net = parse(R"({"input_shape": [4], "layers": [
      {"type": "Dense", "units": 8}, {"type": "Dropout", "rate": 0.1}, {"type": "Dense", "units": 8},
      {"type": "Activation", "activation": "relu"}, {"type": "Dense", "units": 3}, {"type": "Dropout", "rate": 0.2}]})");
  CHECK(names_of(net) == std::vector<std::string>{"dense", "dropout", "dense_1", "activation", "dense_2", "dropout_1"});
  CHECK(net.name() == "sequential");
}

TEST_CASE("Sequential keeps given names and counts them in the automatic ones") {
  Sequential net = parse(R"({"name": "mlp", "input_shape": [4], "layers": [
      {"type": "Dense", "units": 8, "name": "hidden"}, {"type": "Dense", "units": 3}]})");
  CHECK(net.name() == "mlp");
  CHECK(names_of(net) == std::vector<std::string>{"hidden", "dense_1"});
}

TEST_CASE("Sequential automatic names step around names the spec gives") {
  // The second layer's automatic name would be dense_1, which the first layer took.
  Sequential net = parse(R"({"input_shape": [4], "layers": [
      {"type": "Dense", "units": 8, "name": "dense_1"}, {"type": "Dense", "units": 8}, {"type": "Dense", "units": 3}]})");
  CHECK(names_of(net) == std::vector<std::string>{"dense_1", "dense_2", "dense_3"});
  Sequential later = parse(R"({"input_shape": [4], "layers": [
      {"type": "Dense", "units": 8}, {"type": "Dense", "units": 8}, {"type": "Dense", "units": 3, "name": "dense_1"}]})");
  CHECK(names_of(later) == std::vector<std::string>{"dense", "dense_2", "dense_1"});
  Sequential first = parse(R"({"input_shape": [4], "layers": [
      {"type": "Dense", "units": 8}, {"type": "Dense", "units": 3, "name": "dense"}]})");
  CHECK(names_of(first) == std::vector<std::string>{"dense_1", "dense"});
}

TEST_CASE("Sequential rejects duplicate layer names at the later layer") {
  expect_spec_error(R"({"input_shape": [4], "layers": [
      {"type": "Dense", "units": 8, "name": "a"}, {"type": "Dense", "units": 3, "name": "a"}]})",
                    "layers[1].name", "duplicate layer name \"a\"");
}

TEST_CASE("Sequential shapes: per-layer outputs, input and output") {
  Sequential net = parse(R"({"input_shape": [4], "layers": [
      {"type": "Dense", "units": 8}, {"type": "Dropout", "rate": 0.1}, {"type": "Dense", "units": 3}]})");
  CHECK(net.input_shape() == Shape{4});
  CHECK(net.output_shape() == Shape{3});
  CHECK(net.layer_output_shapes() == std::vector<Shape>{Shape{8}, Shape{8}, Shape{3}});
  CHECK(net.param_count() == (4 + 1) * 8 + (8 + 1) * 3);
  CHECK(net.trainable_param_count() == net.param_count());
  std::vector<std::string> vars;
  for (const auto& v : net.variables()) vars.push_back(v->name());
  CHECK(vars == std::vector<std::string>{"dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"});
}

TEST_CASE("Sequential shape errors name layers[i]") {
  expect_spec_error(R"({"input_shape": [4, 4], "layers": [{"type": "Dense", "units": 8}]})", "layers[0]",
                    "Dense expects a flat input of shape (None, features), got (None, 4, 4)");
  expect_spec_error(R"({"input_shape": [2, 2], "layers": [{"type": "Dropout", "rate": 0.5}, {"type": "Dense", "units": 8}]})",
                    "layers[1]", "got (None, 2, 2)");
  // Under a path prefix (a model inlined in a train config), the path carries it.
  expect_spec_error(R"({"input_shape": [4, 4], "layers": [{"type": "Dense", "units": 8}]})", "model.layers[0]",
                    "Dense expects a flat input", "model");
  expect_spec_error(R"({"input_shape": [4], "layers": [{"type": "Dense", "units": -1}]})", "model.layers[0].units",
                    "expected a positive integer", "model");
}

TEST_CASE("Sequential::call turns an op's shape error into a SpecError naming the layer") {
  Sequential net = parse(R"({"input_shape": [4], "layers": [
      {"type": "Activation", "activation": "relu"}, {"type": "Dense", "units": 3}]})", "model");
  Graph g;
  Output x = g.placeholder("x", DType::kF32, Shape{-1, 5});  // not the 4 features the model was built for
  try {
    net.call(g, x, false, "cpu");
    FAIL("expected a SpecError");
  } catch (const SpecError& e) {
    INFO(std::string(e.what()));
    CHECK(e.file() == "model.json");
    CHECK(e.where() == "model.layers[1]");
    CHECK(e.message().find("MatMul") != std::string::npos);
  }
}

TEST_CASE("Sequential::call places nodes on the layer's device and scope") {
  Sequential net = parse(R"({"input_shape": [4], "layers": [
      {"type": "Dense", "units": 8, "device": "cpu"}, {"type": "Dense", "units": 3}]})");
  Graph g;
  Output x = g.placeholder("x", DType::kF32, Shape{-1, 4});
  Output y = net.call(g, x, false, "cuda:0");
  CHECK(g.spec(y).shape == Shape{-1, 3});
  for (const Node& n : g.nodes()) {
    if (n.layer == "dense") CHECK(n.device == "cpu");
    if (n.layer == "dense_1") CHECK(n.device == "cuda:0");
    if (n.layer == "dense_1") CHECK(n.name.rfind("dense_1/", 0) == 0);
  }
}

TEST_CASE("Sequential::to_json gives the resolved spec, which parses back to itself") {
  Sequential net = parse(R"({"input_shape": [4], "layers": [
      {"type": "Dense", "units": 8, "activation": "relu"}, {"type": "Dropout", "rate": 0.25, "device": "cpu"},
      {"type": "Dense", "units": 3, "activation": "softmax", "name": "out"}]})");
  const json resolved = net.to_json();
  const json expected = json::parse(R"({"name": "sequential", "input_shape": [4], "layers": [
      {"type": "Dense", "name": "dense", "units": 8, "activation": "relu", "use_bias": true,
       "kernel_initializer": "glorot_uniform", "bias_initializer": "zeros"},
      {"type": "Dropout", "name": "dropout", "device": "cpu", "rate": 0.25},
      {"type": "Dense", "name": "out", "units": 3, "activation": "softmax", "use_bias": true,
       "kernel_initializer": "glorot_uniform", "bias_initializer": "zeros"}]})");
  CHECK(resolved == expected);
  CHECK(Sequential::from_json(resolved, "model.json", "", 0).to_json() == resolved);
}

TEST_CASE("Sequential builds the same weights for the same seed") {
  const char* spec = R"({"input_shape": [4], "layers": [{"type": "Dense", "units": 8}, {"type": "Dense", "units": 3}]})";
  Sequential a = parse(spec, "", 3), b = parse(spec, "", 3), c = parse(spec, "", 4);
  for (std::size_t i = 0; i < a.variables().size(); ++i) {
    CHECK(a.variables()[i]->read().to_floats() == b.variables()[i]->read().to_floats());
    // Separate models never share variables.
    CHECK(a.variables()[i] != b.variables()[i]);
  }
  CHECK(a.variables()[0]->read().to_floats() != c.variables()[0]->read().to_floats());
}

TEST_CASE("Sequential spec errors name their JSON path") {
  expect_spec_error(R"([1, 2])", "top level", "expected an object, got a list");
  expect_spec_error(R"({"layers": [{"type": "Dense", "units": 3}]})", "top level", "missing required key \"input_shape\"");
  expect_spec_error(R"({"input_shape": [4, 0], "layers": [{"type": "Dense", "units": 3}]})", "input_shape[1]",
                    "expected a positive integer, got 0");
  expect_spec_error(R"({"input_shape": 4, "layers": [{"type": "Dense", "units": 3}]})", "input_shape",
                    "expected a non-empty list of positive integers");
  expect_spec_error(R"({"input_shape": [1, 2, 3, 4, 5, 6], "layers": [{"type": "Dense", "units": 3}]})", "input_shape",
                    "at most 5 dimensions");
  expect_spec_error(R"({"input_shape": [4], "layers": []})", "layers", "expected a non-empty list of layers");
  expect_spec_error(R"({"input_shape": [4]})", "top level", "missing required key \"layers\"");
  expect_spec_error(R"({"input_shape": [4], "layers": [{"type": "Dense", "units": 3}], "optimizer": "adam"})",
                    "optimizer", "unknown key (known keys here: name, input_shape, layers)");
  expect_spec_error(R"({"input_shape": [4], "layers": [3]})", "layers[0]", "expected an object, got 3");
  expect_spec_error(R"({"input_shape": [4], "layers": [{"units": 3}]})", "layers[0]", "missing required key \"type\"");
  expect_spec_error(R"({"input_shape": [4], "layers": [{"type": "Dense", "units": 3}, {"type": "Conv3D"}]})",
                    "layers[1].type", "unknown layer type \"Conv3D\" (known: Activation, AveragePooling2D, BatchNormalization, Conv2D, Delay, Dense, Dropout, Flatten, MaxPooling2D, Parallel, Reshape)");
  expect_spec_error(R"({"name": 5, "input_shape": [4], "layers": [{"type": "Dense", "units": 3}]})", "name",
                    "expected a string, got 5");
}

}  // namespace
}  // namespace tctl
