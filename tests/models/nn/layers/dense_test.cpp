// Dense: the shared layer checks, then parameters, initializers, and one case per bad key.
#include <doctest/doctest.h>

#include <cmath>
#include <numeric>

#include "core/errors.h"
#include "models/nn/layers/layer_test_util.h"

namespace tctl {
namespace {

using testing::build_one_layer;
using testing::check_layer;
using testing::check_layer_spec_error;

std::vector<float> kernel_of(const Sequential& net, std::size_t layer = 0) {
  return net.layers()[layer]->variables()[0]->read().to_floats();
}

TEST_CASE("Dense passes the layer checks") {
  // A product's multiply and add count two: 2 x 8 x 4 per example.
  auto checked = check_layer(R"({"type":"Dense","units":4})", {8}, {.flops_per_example = 64});
  CHECK(checked.output_shape == Shape{4});
  CHECK(checked.layer().name() == "dense");
}

TEST_CASE("Dense passes the layer checks with each activation") {
  for (const std::string activation : {"relu", "sigmoid", "tanh", "softmax", "linear", "leaky_relu", "elu", "gelu"}) {
    CAPTURE(activation);
    check_layer(std::string(R"({"type":"Dense","units":3,"activation":")") + activation + "\"}", {5});
  }
}

TEST_CASE("Dense passes the layer checks without a bias and with he_normal") {
  check_layer(R"({"type":"Dense","units":2,"use_bias":false})", {3});
  check_layer(R"({"type":"Dense","units":5,"kernel_initializer":"he_normal","activation":"relu"})", {7});
}

TEST_CASE("Dense has (in + 1) * units parameters, kernel before bias") {
  auto net = build_one_layer(R"({"type":"Dense","units":4})", {8});
  const Layer& dense = *net->layers()[0];
  CHECK(dense.param_count() == (8 + 1) * 4);
  REQUIRE(dense.variables().size() == 2);
  CHECK(dense.variables()[0]->name() == "dense/kernel");
  CHECK(dense.variables()[0]->shape() == Shape{8, 4});
  CHECK(dense.variables()[1]->name() == "dense/bias");
  CHECK(dense.variables()[1]->shape() == Shape{4});
  CHECK(dense.variables()[0]->trainable());
  // The bias starts at zero by default.
  for (float b : dense.variables()[1]->read().to_floats()) CHECK(b == 0.0f);
}

TEST_CASE("Dense with use_bias false has in * units parameters and no bias node") {
  auto net = build_one_layer(R"({"type":"Dense","units":4,"use_bias":false})", {8});
  const Layer& dense = *net->layers()[0];
  CHECK(dense.param_count() == 8 * 4);
  REQUIRE(dense.variables().size() == 1);
  CHECK(dense.variables()[0]->name() == "dense/kernel");
  Graph g;
  net->call(g, g.placeholder("x", DType::kF32, Shape{-1, 8}), false, "cpu");
  for (const Node& n : g.nodes()) CHECK(n.op->name != "BiasAdd");
  CHECK(dense.to_json()["use_bias"] == false);
}

TEST_CASE("Dense computes x W + b") {
  auto net = build_one_layer(R"({"type":"Dense","units":2,"bias_initializer":"zeros"})", {3});
  const Layer& dense = *net->layers()[0];
  dense.variables()[0]->assign(Tensor::from_floats(Shape{3, 2}, std::vector<float>{1, 2, 3, 4, 5, 6}));
  dense.variables()[1]->assign(Tensor::from_floats(Shape{2}, std::vector<float>{0.5f, -1}));
  auto g = std::make_shared<Graph>();
  Output x = g->placeholder("x", DType::kF32, Shape{-1, 3});
  Output y = net->call(*g, x, false, "cpu");
  ThreadPool inter(1), intra(1);
  Session s(g, inter, intra);
  std::vector<Feed> feeds{{x, Tensor::from_floats(Shape{2, 3}, std::vector<float>{1, 0, -1, 2, 1, 0})}};
  std::vector<Output> fetches{y};
  // [1, 0, -1] W = [1 - 5, 2 - 6]; [2, 1, 0] W = [2 + 3, 4 + 4].
  CHECK(s.run(feeds, fetches)[0].to_floats() == std::vector<float>{-3.5f, -5, 5.5f, 7});
}

TEST_CASE("Dense initializers are deterministic for a seed and differ across seeds and layers") {
  const char* spec = R"({"type":"Dense","units":16})";
  auto a = build_one_layer(spec, {32}, 11);
  auto b = build_one_layer(spec, {32}, 11);
  auto c = build_one_layer(spec, {32}, 12);
  CHECK(kernel_of(*a) == kernel_of(*b));
  CHECK(kernel_of(*a) != kernel_of(*c));

  // Two identical layers in one model get different kernels (the layer index keys the stream).
  nlohmann::json two = {{"input_shape", {16}},
                        {"layers", {{{"type", "Dense"}, {"units", 16}}, {{"type", "Dense"}, {"units", 16}}}}};
  Sequential net = Sequential::from_json(two, "m.json", "", 5);
  CHECK(kernel_of(net, 0) != kernel_of(net, 1));

  for (const std::string init : {"he_normal", "glorot_uniform"}) {
    CAPTURE(init);
    const std::string s = std::string(R"({"type":"Dense","units":8,"bias_initializer":")") + init + "\"}";
    auto n1 = build_one_layer(s, {4}, 3);
    auto n2 = build_one_layer(s, {4}, 3);
    auto bias1 = n1->layers()[0]->variables()[1]->read().to_floats();
    CHECK(bias1 == n2->layers()[0]->variables()[1]->read().to_floats());
    // The bias draws from its own stream, not the kernel's.
    const std::vector<float> kernel = kernel_of(*n1);
    CHECK(std::vector<float>(kernel.begin(), kernel.begin() + 8) != bias1);
  }
}

TEST_CASE("Dense glorot_uniform stays within sqrt(6 / (in + out)) and fills the range") {
  auto net = build_one_layer(R"({"type":"Dense","units":32})", {64});
  const std::vector<float> w = kernel_of(*net);
  const double limit = std::sqrt(6.0 / (64 + 32));
  double mean = 0.0, max_abs = 0.0;
  for (float v : w) {
    CHECK(std::abs(v) <= limit);
    mean += v;
    max_abs = std::max(max_abs, static_cast<double>(std::abs(v)));
  }
  mean /= static_cast<double>(w.size());
  CHECK(max_abs > 0.98 * limit);
  CHECK(std::abs(mean) < 0.05 * limit);
}

TEST_CASE("Dense he_normal has standard deviation about sqrt(2 / fan_in)") {
  auto net = build_one_layer(R"({"type":"Dense","units":128,"kernel_initializer":"he_normal"})", {256});
  const std::vector<float> w = kernel_of(*net);
  double sum = 0.0, sq = 0.0;
  for (float v : w) sum += v;
  const double mean = sum / static_cast<double>(w.size());
  for (float v : w) sq += (v - mean) * (v - mean);
  const double stddev = std::sqrt(sq / static_cast<double>(w.size()));
  CHECK(stddev == doctest::Approx(std::sqrt(2.0 / 256)).epsilon(0.03));
  CHECK(std::abs(mean) < 0.01);
}

TEST_CASE("Dense zeros kernel initializer") {
  auto net = build_one_layer(R"({"type":"Dense","units":3,"kernel_initializer":"zeros"})", {2});
  for (float v : kernel_of(*net)) CHECK(v == 0.0f);
}

TEST_CASE("Dense resolves every key in to_json") {
  auto net = build_one_layer(R"({"type":"Dense","units":3})", {2});
  const nlohmann::json j = net->layers()[0]->to_json();
  CHECK(j == nlohmann::json{{"type", "Dense"},
                            {"name", "dense"},
                            {"units", 3},
                            {"activation", "linear"},
                            {"use_bias", true},
                            {"kernel_initializer", "glorot_uniform"},
                            {"bias_initializer", "zeros"}});
}

TEST_CASE("Dense bad keys name their JSON path") {
  check_layer_spec_error(R"({"type":"Dense","units":-3})", {4}, "layers[0].units",
                         "expected a positive integer, got -3");
  check_layer_spec_error(R"({"type":"Dense","units":0})", {4}, "layers[0].units", "expected a positive integer, got 0");
  check_layer_spec_error(R"({"type":"Dense","units":2.5})", {4}, "layers[0].units",
                         "expected a positive integer, got 2.5");
  check_layer_spec_error(R"({"type":"Dense","units":"4"})", {4}, "layers[0].units", "expected a positive integer");
  check_layer_spec_error(R"({"type":"Dense"})", {4}, "layers[0]", "missing required key \"units\"");
  check_layer_spec_error(R"({"type":"Dense","units":4,"unit":4})", {4}, "layers[0].unit", "unknown key");
  check_layer_spec_error(
      R"({"type":"Dense","units":4,"activation":"relux"})", {4}, "layers[0].activation",
      "unknown value \"relux\" (known: elu, gelu, leaky_relu, linear, relu, sigmoid, softmax, tanh)");
  check_layer_spec_error(R"({"type":"Dense","units":4,"activation":3})", {4}, "layers[0].activation",
                         "expected a string");
  check_layer_spec_error(R"({"type":"Dense","units":4,"use_bias":"yes"})", {4}, "layers[0].use_bias",
                         "expected true or false");
  check_layer_spec_error(R"({"type":"Dense","units":4,"kernel_initializer":"ones"})", {4},
                         "layers[0].kernel_initializer",
                         "known: glorot_uniform, he_normal, orthogonal, uniform, zeros");
  check_layer_spec_error(R"({"type":"Dense","units":4,"bias_initializer":"ones"})", {4}, "layers[0].bias_initializer",
                         "unknown value \"ones\"");
}

TEST_CASE("Dense on a sequence or an image acts on each step or pixel, as Keras' on its last axis") {
  // 2 x 3 x 4 multiply-adds for each of the 5 steps; the same for 2 x 3 pixels.
  auto steps = check_layer(R"({"type":"Dense","units":4,"activation":"softmax"})", {5, 3}, {.flops_per_example = 120});
  CHECK(steps.output_shape == Shape{5, 4});
  CHECK(steps.layer().param_count() == (3 + 1) * 4);
  CHECK(check_layer(R"({"type":"Dense","units":2,"use_bias":false})", {2, 3, 3}).output_shape == Shape{2, 3, 2});
  // Each step's row gives what the same layer gives on that row alone.
  auto seq = build_one_layer(R"({"type":"Dense","units":2,"activation":"tanh"})", {3, 2}, 9);
  auto flat = build_one_layer(R"({"type":"Dense","units":2,"activation":"tanh"})", {2}, 9);
  REQUIRE(kernel_of(*seq) == kernel_of(*flat));
  const std::vector<float> rows{1, -2, 0.5f, 3, -1, 4, 2, 2, -3, 0, 1, 1};
  CHECK(testing::run_net(*seq, Tensor::from_floats(Shape{2, 3, 2}, rows)).to_floats() ==
        testing::run_net(*flat, Tensor::from_floats(Shape{6, 2}, rows)).to_floats());
}

TEST_CASE("Dense fuses its product, bias and ReLU into one node; other activations follow it") {
  using testing::layer_op_names;
  using Ops = std::vector<std::string>;
  CHECK(layer_op_names(R"({"type":"Dense","units":4,"activation":"relu"})", {8}) == Ops{"FusedMatMul"});
  CHECK(layer_op_names(R"({"type":"Dense","units":4})", {8}) == Ops{"FusedMatMul"});
  CHECK(layer_op_names(R"({"type":"Dense","units":4,"activation":"sigmoid"})", {8}) == Ops{"FusedMatMul", "Sigmoid"});
  CHECK(layer_op_names(R"({"type":"Dense","units":4,"activation":"softmax"})", {8}) == Ops{"FusedMatMul", "Softmax"});
  CHECK(layer_op_names(R"({"type":"Dense","units":4,"activation":"relu","use_bias":false})", {8}) ==
        Ops{"MatMul", "Relu"});
}

}  // namespace
}  // namespace tctl
