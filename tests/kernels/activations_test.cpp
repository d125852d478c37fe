#include "kernels/op_test_util.h"

using namespace tctl;
using tctl::testing::check_op;
using tctl::testing::run_op;

TEST_CASE("activation gradients") {
  check_op("Relu", {{4, 3}});
  check_op("Sigmoid", {{4, 3}});
  check_op("Tanh", {{4, 3}});
  check_op("Softmax", {{4, 5}});
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
