// Activation: the shared layer checks for every activation name, values, and the bad keys.
#include <doctest/doctest.h>

#include <cmath>

#include "core/errors.h"
#include "models/nn/activations.h"
#include "models/nn/layers/layer_test_util.h"

namespace tctl {
namespace {

using testing::build_one_layer;
using testing::check_layer;
using testing::check_layer_spec_error;

std::string activation_spec(const std::string& name) { return R"({"type":"Activation","activation":")" + name + "\"}"; }

// The layer's output for x ([rows, cols]) in inference mode.
std::vector<float> run_layer(const std::string& name, const Shape& shape, const std::vector<float>& x) {
  auto net = build_one_layer(activation_spec(name), shape.without_batch());
  auto g = std::make_shared<Graph>();
  Output in = g->placeholder("x", DType::kF32, Shape::concat(-1, shape.without_batch()));
  Output y = net->call(*g, in, false, "cpu");
  ThreadPool inter(1), intra(1);
  Session s(g, inter, intra);
  std::vector<Feed> feeds{{in, Tensor::from_floats(shape, x)}};
  std::vector<Output> fetches{y};
  return s.run(feeds, fetches)[0].to_floats();
}

TEST_CASE("Activation passes the layer checks for every name") {
  for (const std::string& name : activation_names()) {
    CAPTURE(name);
    auto checked = check_layer(activation_spec(name), {5});
    CHECK(checked.output_shape == Shape{5});
    CHECK(checked.layer().param_count() == 0);
    CHECK(checked.layer().variables().empty());
    CHECK(checked.layer().name() == "activation");
    CHECK(checked.layer().to_json() ==
          nlohmann::json{{"type", "Activation"}, {"name", "activation"}, {"activation", name}});
  }
  // Elementwise activations keep any input shape.
  check_layer(activation_spec("tanh"), {2, 3});
}

TEST_CASE("Activation computes each function") {
  const std::vector<float> x{-2.0f, -0.5f, 0.0f, 0.5f, 3.0f, 1.0f};
  const Shape shape{2, 3};
  std::vector<float> relu = run_layer("relu", shape, x);
  std::vector<float> sigmoid = run_layer("sigmoid", shape, x);
  std::vector<float> tanh = run_layer("tanh", shape, x);
  std::vector<float> linear = run_layer("linear", shape, x);
  std::vector<float> softmax = run_layer("softmax", shape, x);
  std::vector<float> leaky = run_layer("leaky_relu", shape, x);
  std::vector<float> elu = run_layer("elu", shape, x);
  std::vector<float> gelu = run_layer("gelu", shape, x);
  for (std::size_t i = 0; i < x.size(); ++i) {
    CHECK(relu[i] == std::max(x[i], 0.0f));
    CHECK(sigmoid[i] == doctest::Approx(1.0 / (1.0 + std::exp(-static_cast<double>(x[i])))).epsilon(1e-6));
    CHECK(tanh[i] == doctest::Approx(std::tanh(static_cast<double>(x[i]))).epsilon(1e-6));
    CHECK(linear[i] == x[i]);
    const double xi = x[i];
    // Keras 3's string defaults: negative_slope 0.2, alpha 1, and the exact erf GELU.
    CHECK(leaky[i] == doctest::Approx(xi > 0 ? xi : 0.2 * xi).epsilon(1e-6));
    CHECK(elu[i] == doctest::Approx(xi > 0 ? xi : std::expm1(xi)).epsilon(1e-6));
    CHECK(gelu[i] == doctest::Approx(0.5 * xi * (1.0 + std::erf(xi / std::sqrt(2.0)))).epsilon(1e-6));
  }
  // GELU(1) from the erf form is 0.841345; the tanh approximation gives 0.841192.
  CHECK(run_layer("gelu", Shape{1, 1}, {1.0f})[0] == doctest::Approx(0.8413447).epsilon(1e-6));
  for (int row = 0; row < 2; ++row) {
    double total = 0.0;
    for (int j = 0; j < 3; ++j) total += std::exp(static_cast<double>(x[row * 3 + j]));
    for (int j = 0; j < 3; ++j)
      CHECK(softmax[row * 3 + j] ==
            doctest::Approx(std::exp(static_cast<double>(x[row * 3 + j])) / total).epsilon(1e-6));
  }
}

TEST_CASE("Activation bad keys name their JSON path") {
  check_layer_spec_error(R"({"type":"Activation"})", {3}, "layers[0]", "missing required key \"activation\"");
  check_layer_spec_error(
      R"({"type":"Activation","activation":"swish"})", {3}, "layers[0].activation",
      "unknown value \"swish\" (known: elu, gelu, leaky_relu, linear, relu, sigmoid, softmax, tanh)");
  check_layer_spec_error(R"({"type":"Activation","activation":"relu","units":3})", {3}, "layers[0].units",
                         "unknown key");
  check_layer_spec_error(R"({"type":"Activation","activation":null})", {3}, "layers[0].activation",
                         "expected a string, got null");
}

}  // namespace
}  // namespace tctl
