#include "kernels/op_test_util.h"

using namespace tctl;
using tctl::testing::check_op;
using tctl::testing::OpCheck;
using tctl::testing::run_op;

TEST_CASE("activation gradients") {
  check_op("Relu", {{4, 3}});
  check_op("Sigmoid", {{4, 3}});
  check_op("Tanh", {{4, 3}});
  check_op("Softmax", {{4, 5}});
  check_op("LeakyRelu", {{4, 3}}, OpCheck{.attrs = Attrs{{"alpha", 0.2}}});
  check_op("Elu", {{4, 3}}, OpCheck{.attrs = Attrs{{"alpha", 1.0}}});
  check_op("Gelu", {{4, 3}});
  check_op("Gelu", {{2, 3}}, OpCheck{.gap = 2.0f});  // far from 0, where GELU's tails bend
}

TEST_CASE("leaky ReLU, ELU and GELU values") {
  Tensor x = Tensor::from_floats(Shape{1, 4}, std::vector<float>{-2.0f, -0.5f, 0.0f, 1.5f});
  auto leaky = run_op("LeakyRelu", {x}, Attrs{{"alpha", 0.2}}).to_floats();
  auto elu = run_op("Elu", {x}, Attrs{{"alpha", 1.0}}).to_floats();
  auto gelu = run_op("Gelu", {x}, {}).to_floats();
  const double xs[] = {-2.0, -0.5, 0.0, 1.5};
  for (int i = 0; i < 4; ++i) {
    CHECK(leaky[i] == doctest::Approx(xs[i] > 0 ? xs[i] : 0.2 * xs[i]));
    CHECK(elu[i] == doctest::Approx(xs[i] > 0 ? xs[i] : std::exp(xs[i]) - 1.0));
    CHECK(gelu[i] == doctest::Approx(0.5 * xs[i] * (1.0 + std::erf(xs[i] / std::sqrt(2.0)))).epsilon(1e-6));
  }
  CHECK(run_op("LeakyRelu", {x}, Attrs{{"alpha", 0.5}}).to_floats()[0] == doctest::Approx(-1.0));
}

TEST_CASE("activation values") {
  Tensor x = Tensor::from_floats(Shape{1, 3}, std::vector<float>{-1.0f, 0.0f, 2.0f});
  CHECK(run_op("Relu", {x}, {}).to_floats() == std::vector<float>{0.0f, 0.0f, 2.0f});
  auto s = run_op("Sigmoid", {x}, {}).to_floats();
  CHECK(s[1] == doctest::Approx(0.5));
  CHECK(s[2] == doctest::Approx(1.0 / (1.0 + std::exp(-2.0))));
  auto t = run_op("Tanh", {x}, {}).to_floats();
  CHECK(t[0] == doctest::Approx(std::tanh(-1.0)));
}

TEST_CASE("softmax rows sum to one and survive huge logits") {
  Tensor x = Tensor::from_floats(Shape{2, 3}, std::vector<float>{1000.0f, 1001.0f, 999.0f, -5.0f, 0.0f, 5.0f});
  auto p = run_op("Softmax", {x}, {}).to_floats();
  for (int r = 0; r < 2; ++r) {
    double sum = p[r * 3] + p[r * 3 + 1] + p[r * 3 + 2];
    CHECK(sum == doctest::Approx(1.0));
    for (int j = 0; j < 3; ++j) CHECK(std::isfinite(p[r * 3 + j]));
  }
  CHECK(p[1] > p[0]);
}
