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

TEST_CASE("dropout's vector loop and its scalar tail draw the same mask for an element") {
  // Element i's mask depends on the stream and i alone. At width n the last n % lanes elements are drawn one
  // at a time; at width 64 every one of them is drawn in a vector, in some lane. Two threads start a block
  // in the middle of the row.
  for (int threads : {1, 2}) {
    const std::vector<float> wide =
        run_op("Dropout", {Tensor::filled(Shape{1, 64}, 1.0f)}, Attrs{{"rate", 0.5}}, threads).to_floats();
    for (std::int64_t n = 1; n < 64; ++n) {
      const std::vector<float> narrow =
          run_op("Dropout", {Tensor::filled(Shape{1, n}, 1.0f)}, Attrs{{"rate", 0.5}}, threads).to_floats();
      for (std::int64_t i = 0; i < n; ++i) {
        CAPTURE(threads);
        CAPTURE(n);
        CAPTURE(i);
        REQUIRE(narrow[static_cast<std::size_t>(i)] == wide[static_cast<std::size_t>(i)]);
      }
    }
  }
}

TEST_CASE("dropout per sequence keeps one mask per example and feature at every step") {
  // [4 examples, 6 steps, 2 x 5 features]: every step of an example drops the same features.
  const Shape shape{4, 6, 2, 5};
  const Attrs attrs{{"rate", 0.5}, {"per_sequence", std::int64_t{1}}};
  const std::vector<float> y = run_op("Dropout", {Tensor::filled(shape, 1.0f)}, attrs).to_floats();
  const std::int64_t width = 10, steps = 6;
  int zeros = 0;
  bool examples_differ = false;
  for (std::int64_t n = 0; n < 4; ++n)
    for (std::int64_t t = 0; t < steps; ++t)
      for (std::int64_t f = 0; f < width; ++f) {
        const float v = y[static_cast<std::size_t>((n * steps + t) * width + f)];
        CHECK(v == y[static_cast<std::size_t>(n * steps * width + f)]);
        zeros += v == 0.0f;
        examples_differ = examples_differ || v != y[static_cast<std::size_t>(t * width + f)];
      }
  CHECK(examples_differ);
  // 40 draws of a fair coin, each kept at every one of the 6 steps.
  CHECK(zeros % steps == 0);
  CHECK(zeros > 6 * 8);
  CHECK(zeros < 6 * 32);
  // Any thread count, and the gradient replays it.
  CHECK(run_op("Dropout", {Tensor::filled(shape, 1.0f)}, attrs, 3).to_floats() == y);
  check_op("Dropout", {{3, 4, 5}}, OpCheck{.attrs = attrs});
}
