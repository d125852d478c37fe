// Delay: an identity that sleeps in its forward kernel only.
#include <doctest/doctest.h>

#include <chrono>

#include "core/errors.h"
#include "kernels/op_test_util.h"

namespace tctl {
namespace {

using testing::check_op;
using testing::run_op;

TEST_CASE("Delay passes the op checks") {
  testing::OpCheck c;
  c.attrs = Attrs{{"ms", 0.0}};
  check_op("Delay", {{4, 3}}, c);
  c.attrs = Attrs{{"ms", 1.0}};
  check_op("Delay", {{2, 5}}, c);
}

TEST_CASE("Delay outputs its input and blocks at least ms") {
  Tensor x = Tensor::from_floats(Shape{2, 2}, std::vector<float>{1, -2, 3, 4});
  const auto start = std::chrono::steady_clock::now();
  Tensor y = run_op("Delay", {x}, Attrs{{"ms", 20.0}});
  const auto elapsed = std::chrono::steady_clock::now() - start;
  CHECK(y.to_floats() == x.to_floats());
  // A lower bound only: a sleep never returns early.
  CHECK(elapsed >= std::chrono::milliseconds(20));
}

TEST_CASE("Delay rejects a negative ms when the node is added") {
  Graph g;
  Output x = g.placeholder("x", DType::kF32, Shape{2});
  CHECK_THROWS_AS(g.add("Delay", {x}, Attrs{{"ms", -1.0}}), ShapeError);
}

}  // namespace
}  // namespace tctl
