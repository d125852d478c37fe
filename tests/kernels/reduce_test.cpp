#include "kernels/op_test_util.h"

using namespace tctl;
using tctl::testing::check_op;
using tctl::testing::run_op;

TEST_CASE("reduction gradients") {
  check_op("Sum", {{4, 3}});
  check_op("Mean", {{7}});
}

TEST_CASE("reduction values") {
  Tensor x = Tensor::from_floats(Shape{4}, std::vector<float>{1, 2, 3, 4});
  CHECK(run_op("Sum", {x}, {}).item() == doctest::Approx(10));
  CHECK(run_op("Mean", {x}, {}).item() == doctest::Approx(2.5));
}
