#include "models/nn/sequential.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "core/errors.h"
#include "core/text.h"
#include "models/scoped_env.h"
#include "spec_error_check.h"

namespace tctl {
namespace {

using nlohmann::json;
using testing::check_spec_error;
using testing::ScopedEnv;

Sequential parse(const std::string& text, const std::string& path = "", std::uint64_t seed = 0) {
  return Sequential::from_json(json::parse(text), "model.json", path, seed);
}

// Parsing `text` must fail with a SpecError at `where` whose message contains `message_part`.
void expect_spec_error(const std::string& text, const std::string& where, const std::string& message_part,
                       const std::string& path = "") {
  INFO("spec: " << text);
  check_spec_error([&] { parse(text, path); }, "model.json", where, {message_part});
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

TEST_CASE("Sequential keeps given names and counts only the unnamed layers, as Keras") {
  // Keras 3: Sequential([Dense(8, name="hidden"), Dense(3)]) names the second layer dense.
  Sequential net = parse(R"({"name": "mlp", "input_shape": [4], "layers": [
      {"type": "Dense", "units": 8, "name": "hidden"}, {"type": "Dense", "units": 3}]})");
  CHECK(net.name() == "mlp");
  CHECK(names_of(net) == std::vector<std::string>{"hidden", "dense"});
  Sequential mixed = parse(R"({"input_shape": [4], "layers": [{"type": "Dense", "units": 8},
      {"type": "Dense", "units": 8, "name": "middle"}, {"type": "Dense", "units": 3}]})");
  CHECK(names_of(mixed) == std::vector<std::string>{"dense", "middle", "dense_1"});
}

TEST_CASE("Sequential automatic names step around names the spec gives") {
  // The third layer's automatic name would be dense_1, which the first layer took.
  Sequential net = parse(R"({"input_shape": [4], "layers": [
      {"type": "Dense", "units": 8, "name": "dense_1"}, {"type": "Dense", "units": 8}, {"type": "Dense", "units": 3}]})");
  CHECK(names_of(net) == std::vector<std::string>{"dense_1", "dense", "dense_2"});
  Sequential later = parse(R"({"input_shape": [4], "layers": [
      {"type": "Dense", "units": 8}, {"type": "Dense", "units": 8}, {"type": "Dense", "units": 3, "name": "dense_1"}]})");
  CHECK(names_of(later) == std::vector<std::string>{"dense", "dense_2", "dense_1"});
  Sequential first = parse(R"({"input_shape": [4], "layers": [
      {"type": "Dense", "units": 8}, {"type": "Dense", "units": 3, "name": "dense"}]})");
  CHECK(names_of(first) == std::vector<std::string>{"dense_1", "dense"});
}

TEST_CASE("Sequential names a Bidirectional's wrapped layer in the model's scope, as Keras makes it first") {
  // Keras: Sequential([Embedding, Bidirectional(LSTM), Bidirectional(LSTM), LSTM]) names the wrapped layers
  // lstm and lstm_1 and the last lstm_2; each wrapper's two directions are forward_ and backward_ them.
  Sequential net = parse(R"({"input_shape": [5], "layers": [{"type": "Embedding", "input_dim": 9, "output_dim": 2},
      {"type": "Bidirectional", "layer": {"type": "LSTM", "units": 2, "return_sequences": true}},
      {"type": "Bidirectional", "layer": {"type": "LSTM", "units": 2, "return_sequences": true}},
      {"type": "LSTM", "units": 2}]})");
  CHECK(names_of(net) == std::vector<std::string>{"embedding", "bidirectional", "bidirectional_1", "lstm_2"});
  std::vector<std::string> vars;
  for (const auto& v : net.variables()) vars.push_back(v->name());
  CHECK(std::find(vars.begin(), vars.end(), "bidirectional/forward_lstm/kernel") != vars.end());
  CHECK(std::find(vars.begin(), vars.end(), "bidirectional_1/backward_lstm_1/kernel") != vars.end());
  CHECK(net.to_json()["layers"][2]["layer"]["name"] == "lstm_1");
  // A name the spec gives, to a wrapped layer or to a model's, is stepped around.
  Sequential given = parse(R"({"input_shape": [5], "layers": [{"type": "Embedding", "input_dim": 9, "output_dim": 2},
      {"type": "Bidirectional", "layer": {"type": "LSTM", "units": 2, "return_sequences": true}},
      {"type": "Bidirectional", "layer": {"type": "LSTM", "units": 2, "name": "lstm", "return_sequences": true}},
      {"type": "LSTM", "units": 2, "name": "lstm_1"}]})");
  CHECK(given.to_json()["layers"][1]["layer"]["name"] == "lstm_2");
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
  const std::string conv = R"({"type": "Conv1D", "filters": 2, "kernel_size": 2})";
  expect_spec_error(R"({"input_shape": [4], "layers": [)" + conv + "]}", "layers[0]",
                    "Conv1D expects an input of shape (None, steps, channels), got (None, 4)");
  expect_spec_error(R"({"input_shape": [2, 2], "layers": [{"type": "Flatten"}, )" + conv + "]}", "layers[1]",
                    "got (None, 4)");
  // Under a path prefix (a model inlined in a train config), the path carries it.
  expect_spec_error(R"({"input_shape": [4], "layers": [)" + conv + "]}", "model.layers[0]", "Conv1D expects an input",
                    "model");
  expect_spec_error(R"({"input_shape": [4], "layers": [{"type": "Dense", "units": -1}]})", "model.layers[0].units",
                    "expected a positive integer", "model");
}

TEST_CASE("Sequential::call turns an op's shape error into a SpecError naming the layer") {
  Sequential net = parse(R"({"input_shape": [4], "layers": [
      {"type": "Activation", "activation": "relu"}, {"type": "Dense", "units": 3}]})",
                         "model");
  Graph g;
  Output x = g.placeholder("x", DType::kF32, Shape{-1, 5});  // not the 4 features the model was built for
  check_spec_error([&] { net.call(g, x, false, "cpu"); }, "model.json", "model.layers[1]", {"MatMul"});
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
  const char* spec =
      R"({"input_shape": [4], "layers": [{"type": "Dense", "units": 8}, {"type": "Dense", "units": 3}]})";
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
  expect_spec_error(R"({"layers": [{"type": "Dense", "units": 3}]})", "top level",
                    "missing required key \"input_shape\"");
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
  // Every key a layer takes is listed, `device` and `name` (read before the layer's own) included.
  expect_spec_error(
      R"({"input_shape": [4], "layers": [{"type": "Dense", "units": 3, "unit": 3}]})", "layers[0].unit",
      "unknown key (known keys here: activation, bias_initializer, device, ignore_mask, kernel_initializer, name, "
      "type, units, use_bias)");
  expect_spec_error(R"({"input_shape": [4], "layers": [{"units": 3}]})", "layers[0]", "missing required key \"type\"");
  expect_spec_error(R"({"input_shape": [4], "layers": [{"type": "Dense", "units": 3}, {"type": "Conv3D"}]})",
                    "layers[1].type", "unknown layer type \"Conv3D\" (known: " + join(layer_type_names()) + ")");
  expect_spec_error(R"({"name": 5, "input_shape": [4], "layers": [{"type": "Dense", "units": 3}]})", "name",
                    "expected a string, got 5");
}

TEST_CASE("Sequential refuses shapes whose element count overflows, naming the place, never a negative count") {
  // 2^32 x 2^32 wraps to 0 in 64 bits: this used to reach a division by zero (SIGFPE) in Dense.
  expect_spec_error(
      R"({"input_shape": [4294967296, 4294967296], "layers": [{"type": "Flatten"}, {"type": "Dense", "units": 2}]})",
      "input_shape", "about 1.84e+19 elements per example, more than the 2^36");
  // Past 2^63 the product used to print as a negative number.
  expect_spec_error(R"({"input_shape": [3037000500, 3037000500, 2], "layers": [{"type": "Flatten"}]})", "input_shape",
                    "about 1.84e+19 elements");
  expect_spec_error(
      R"({"input_shape": [4], "layers": [{"type": "Reshape", "target_shape": [4294967296, 4294967296, -1]}]})",
      "layers[0].target_shape", "more than the 2^36 elements");
  expect_spec_error(
      R"({"input_shape": [8, 8, 1], "layers": [{"type": "Conv2D", "filters": 4611686018427387904, "kernel_size": 3}]})",
      "layers[0].filters", "larger than the 2^31 elements");
  expect_spec_error(
      R"({"input_shape": [8, 8, 1], "layers": [{"type": "Conv2D", "filters": 2, "kernel_size": 9223372036854775807, "padding": "same"}]})",
      "layers[0].kernel_size", "at most 65536");
  expect_spec_error(R"({"input_shape": [65536, 65536, 17], "layers": [{"type": "Flatten"}]})", "input_shape",
                    "about 7.3e+10 elements per example");
}

TEST_CASE(
    "Sequential refuses a model whose weights pass the memory limit before allocating any, and says how much it "
    "needs") {
  ScopedEnv limit("TENSORCTL_MEMORY_LIMIT", "1M");
  CHECK(memory_limit_bytes() == 1 << 20);
  // 3 x 512 x 512 floats = 3 MiB: the second layer passes 1 MiB, and the message gives the whole model's need.
  expect_spec_error(R"({"input_shape": [512], "layers": [{"type": "Dense", "units": 512, "use_bias": false},
                        {"type": "Dense", "units": 512, "use_bias": false}, {"type": "Dense", "units": 512, "use_bias": false}]})",
                    "layers[1]", "the model's weights need 3.00 MB, more than the memory limit of 1.00 MB");
  // Just under the limit builds.
  CHECK(parse(R"({"input_shape": [511], "layers": [{"type": "Dense", "units": 512, "use_bias": false}]})")
            .param_count() == 511 * 512);
}

TEST_CASE("check_training_memory counts weights, gradients, slots and one batch of activations") {
  ScopedEnv limit("TENSORCTL_MEMORY_LIMIT", "1M");
  const Sequential::Size net = Sequential::check(
      json::parse(R"({"input_shape": [64], "layers": [{"type": "Dense", "units": 64}]})"), "m.json", "");
  CHECK(net.params == 64 * 64 + 64);
  CHECK(net.activation_bytes_per_example == 64 * 4);
  // 4160 weights x 4 bytes x (2 + 2 Adam slots) = 66,560 bytes, plus 2 x 512 bytes of activations per example.
  CHECK_NOTHROW(check_training_memory(net, 900, 2, "c.json", "batch_size"));
  check_spec_error([&] { check_training_memory(net, 1000000000000, 2, "c.json", "batch_size"); }, "c.json",
                   "batch_size", {"for a batch of 1000000000000"});
}

TEST_CASE("a training step's activations count every layer inside a Parallel's branches, nested ones too") {
  // Each branch holds its layers' outputs until the merge, and their gradients after: counted as the
  // Parallel's one output, 16 branches of 262144 features were estimated at 1.29 GB and grew past 7 GB.
  const Sequential::Size net = Sequential::check(json::parse(R"({"input_shape": [8], "layers": [
      {"type": "Dense", "units": 64},
      {"type": "Parallel", "merge": "add", "branches": [
        [{"type": "Activation", "activation": "gelu"}],
        [{"type": "Dense", "units": 32}, {"type": "Dense", "units": 64}],
        [{"type": "Parallel", "merge": "concat", "branches": [[{"type": "Dense", "units": 16}],
                                                              [{"type": "Dense", "units": 48}]]}]]},
      {"type": "Dense", "units": 10}]})"),
                                                 "m.json", "");
  // dense 64, the Parallel's sum 64, its branches 64 | 32 + 64 | the inner concat 64 with 16 + 48, dense 10.
  CHECK(net.activation_bytes_per_example == (64 + 64 + 64 + 32 + 64 + 64 + 16 + 48 + 10) * 4);
  // A model without a Parallel counts as it did: every layer's output.
  CHECK(parse(R"({"input_shape": [8], "layers": [{"type": "Dense", "units": 64}, {"type": "Dense", "units": 10}]})")
            .activation_bytes_per_example() == (64 + 10) * 4);
}

TEST_CASE("a layer inside a Parallel's branch whose output passes 2^36 elements is refused at its path") {
  // The Parallel's own output is small; the branch's first Conv2D gives 2^62 elements per example, which
  // the count of the branches' activations would overflow on. The limit keeps a model that slips past
  // from allocating its 12 GB of weights.
  ScopedEnv limit("TENSORCTL_MEMORY_LIMIT", "1G");
  expect_spec_error(R"({"input_shape": [65536, 65536, 1], "layers": [{"type": "Parallel", "merge": "add", "branches": [
                        [{"type": "Conv2D", "filters": 1073741824, "kernel_size": 1}, {"type": "Conv2D", "filters": 1, "kernel_size": 1}],
                        [{"type": "Conv2D", "filters": 1, "kernel_size": 1}]]}]})",
                    "layers[0].branches[0][0]",
                    "the output (None, 65536, 65536, 1073741824) has about 4.61e+18 elements per example");
}

TEST_CASE("Nested Parallel layers build in time linear in their size") {
  // 40 levels, each a Parallel of the level below and a Dense: was a copy of the whole subtree per level.
  std::string layer = R"({"type": "Dense", "units": 2})";
  for (int i = 0; i < 40; ++i)
    layer =
        R"({"type": "Parallel", "merge": "add", "branches": [[)" + layer + R"(], [{"type": "Dense", "units": 2}]]})";
  const Sequential net = parse(R"({"input_shape": [3], "layers": [)" + layer + "]}");
  CHECK(net.output_shape() == Shape{2});
  CHECK(net.variables().size() == 2 * 41);
}

}  // namespace
}  // namespace tctl
