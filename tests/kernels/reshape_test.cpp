// Reshape: the shared op checks, element order, and the element-count check naming the node.
#include "kernels/op_test_util.h"

using namespace tctl;
using tctl::testing::check_op;
using tctl::testing::OpCheck;
using tctl::testing::random_tensor;
using tctl::testing::run_op;

TEST_CASE("Reshape passes the op checks and keeps the batch") {
  check_op("Reshape", {{3, 2, 2, 3}}, OpCheck{.attrs = Attrs{{"shape", std::vector<std::int64_t>{12}}}});
  check_op("Reshape", {{2, 6}}, OpCheck{.attrs = Attrs{{"shape", std::vector<std::int64_t>{3, 2}}}});
  Tensor x = random_tensor(Shape{2, 2, 3}, 1);
  Tensor y = run_op("Reshape", {x}, Attrs{{"shape", std::vector<std::int64_t>{6}}});
  CHECK(y.shape() == Shape{2, 6});
  CHECK(y.to_floats() == x.to_floats());
}

TEST_CASE("Reshape refuses a different element count, naming the node") {
  Graph g;
  Output x = g.placeholder("x", DType::kF32, Shape{-1, 2, 3});
  try {
    g.add("Reshape", {x}, Attrs{{"shape", std::vector<std::int64_t>{5}}});
    FAIL("expected a ShapeError");
  } catch (const ShapeError& e) {
    const std::string m = e.what();
    CHECK(m.find("Reshape") != std::string::npos);
    CHECK(m.find("6 elements per example, not 5") != std::string::npos);
  }
}
