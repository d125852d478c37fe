#include "kernels/op_test_util.h"

using namespace tctl;
using tctl::testing::check_op;
using tctl::testing::OpCheck;
using tctl::testing::run_op;

TEST_CASE("dropout gradient replays the forward mask") {
  check_op("Dropout", {{6, 5}}, OpCheck{.attrs = Attrs{{"rate", 0.3}}});
}

TEST_CASE("dropout drops about `rate` and scales the rest") {
  Tensor x = Tensor::filled(Shape{100, 100}, 1.0f);
  auto y = run_op("Dropout", {x}, Attrs{{"rate", 0.25}}).to_floats();
  int zeros = 0;
  for (float v : y) {
    if (v == 0.0f) {
      ++zeros;
    } else {
      CHECK(v == doctest::Approx(1.0 / 0.75));
    }
  }
  CHECK(zeros > 2300);
  CHECK(zeros < 2700);
}
