#include "models/nn/activations.h"

#include <doctest/doctest.h>

#include <cmath>
#include <memory>

#include "core/session.h"

namespace tctl {
namespace {

std::vector<float> run_activation(const std::string& name, const Shape& shape, const std::vector<float>& x) {
  auto g = std::make_shared<Graph>();
  Output in = g->placeholder("x", DType::kF32, Shape::concat(-1, shape.without_batch()));
  Output y = apply_activation(*g, in, name);
  ThreadPool inter(1), intra(1);
  Session s(g, inter, intra);
  std::vector<Feed> feeds{{in, Tensor::from_floats(shape, x)}};
  std::vector<Output> fetches{y};
  return s.run(feeds, fetches)[0].to_floats();
}

TEST_CASE("activation names, sorted") {
  CHECK(activation_names() ==
        std::vector<std::string>{"elu", "gelu", "leaky_relu", "linear", "relu", "sigmoid", "softmax", "tanh"});
}

TEST_CASE("apply_activation adds one op per name, none for linear") {
  Graph g;
  Output x = g.placeholder("x", DType::kF32, Shape{-1, 4});
  CHECK(apply_activation(g, x, "linear") == x);
  CHECK(g.size() == 1);
  const std::vector<std::pair<std::string, std::string>> ops{
      {"relu", "Relu"}, {"sigmoid", "Sigmoid"}, {"tanh", "Tanh"}, {"softmax", "Softmax"}, {"leaky_relu", "LeakyRelu"},
      {"elu", "Elu"},   {"gelu", "Gelu"}};
  for (const auto& [name, op] : ops) {
    CAPTURE(name);
    Output y = apply_activation(g, x, name);
    CHECK(g.node(y).op->name == op);
    CHECK(g.node(y).inputs == std::vector<int>{x.node});
    CHECK(g.spec(y).shape == Shape{-1, 4});
  }
}

TEST_CASE("activations compute their functions") {
  const std::vector<float> x{-30.0f, -1.0f, 0.0f, 0.25f, 2.0f, 30.0f};
  const Shape shape{2, 3};
  auto relu = run_activation("relu", shape, x);
  auto sigmoid = run_activation("sigmoid", shape, x);
  auto tanh = run_activation("tanh", shape, x);
  CHECK(run_activation("linear", shape, x) == x);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    CHECK(relu[i] == (x[i] > 0 ? x[i] : 0.0f));
    CHECK(sigmoid[i] == doctest::Approx(1.0 / (1.0 + std::exp(-xi))).epsilon(1e-6));
    CHECK(tanh[i] == doctest::Approx(std::tanh(xi)).epsilon(1e-6));
  }
}

TEST_CASE("softmax is row-wise and stable for large inputs") {
  const std::vector<float> x{1000.0f, 1001.0f, 1002.0f, -5.0f, 0.0f, 5.0f};
  auto y = run_activation("softmax", Shape{2, 3}, x);
  for (int r = 0; r < 2; ++r) {
    double sum = 0.0;
    const double mx = x[static_cast<std::size_t>(r * 3 + 2)];
    for (int j = 0; j < 3; ++j) sum += std::exp(x[static_cast<std::size_t>(r * 3 + j)] - mx);
    for (int j = 0; j < 3; ++j) {
      const std::size_t i = static_cast<std::size_t>(r * 3 + j);
      CHECK(std::isfinite(y[i]));
      CHECK(y[i] == doctest::Approx(std::exp(x[i] - mx) / sum).epsilon(1e-6));
    }
  }
}

}  // namespace
}  // namespace tctl
