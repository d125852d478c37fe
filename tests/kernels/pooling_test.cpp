// MaxPool2D, AvgPool2D and their gradients: finite differences, reference values for both paddings,
// ties, and shape errors.
#include <cstring>
#include <limits>
#include <random>
#include <utility>

#include "kernels/op_test_util.h"

using namespace tctl;
using tctl::testing::check_op_inputs;
using tctl::testing::OpCheck;
using tctl::testing::run_op;

namespace {

Attrs pool_attrs(std::int64_t ph, std::int64_t pw, std::int64_t sh, std::int64_t sw, const std::string& padding) {
  return Attrs{{"window", std::vector<std::int64_t>{ph, pw}},
               {"strides", std::vector<std::int64_t>{sh, sw}},
               {"padding", padding}};
}

// Distinct values at least 0.05 apart in a scrambled order, so no window has a near tie that a finite
// difference step of 0.01 could flip.
Tensor distinct_tensor(const Shape& shape) {
  const std::int64_t n = shape.num_elements();
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] = static_cast<float>((i * 37 + 11) % n) * 0.05f - 1.0f;
  return Tensor::from_floats(shape, v);
}

}  // namespace

TEST_CASE("pooling gradients for strides 1 and 2, both paddings, non-square sizes, batch 2") {
  for (const std::string op : {"MaxPool2D", "AvgPool2D"})
    for (const std::string padding : {"valid", "same"}) {
      CAPTURE(padding);
      check_op_inputs(op, {distinct_tensor(Shape{2, 5, 7, 3})}, OpCheck{.attrs = pool_attrs(2, 2, 2, 2, padding)});
      check_op_inputs(op, {distinct_tensor(Shape{2, 6, 5, 2})}, OpCheck{.attrs = pool_attrs(3, 2, 1, 2, padding)});
      check_op_inputs(op, {distinct_tensor(Shape{3, 4, 4, 1})}, OpCheck{.attrs = pool_attrs(3, 3, 2, 1, padding)});
      // 17 channels: whole vectors and a tail. 2x2 windows with stride 2 tile a 4x6 input (MaxPool2DGrad
      // writes each element once); "valid" on 5x7 leaves the last row and column out (the scatter path).
      check_op_inputs(op, {distinct_tensor(Shape{2, 4, 6, 17})}, OpCheck{.attrs = pool_attrs(2, 2, 2, 2, padding)});
    }
}

TEST_CASE("MaxPool2D and AvgPool2D values with \"same\" padding average over the covered elements only") {
  // 3x3 input, pool 2 stride 2 "same": windows {0,1,3,4}, {2,5}, {6,7}, {8}.
  Tensor x = Tensor::from_floats(Shape{1, 3, 3, 1}, std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(run_op("MaxPool2D", {x}, pool_attrs(2, 2, 2, 2, "same")).to_floats() == std::vector<float>{5, 6, 8, 9});
  CHECK(run_op("AvgPool2D", {x}, pool_attrs(2, 2, 2, 2, "same")).to_floats() == std::vector<float>{3, 4.5f, 7.5f, 9});
  CHECK(run_op("MaxPool2D", {x}, pool_attrs(2, 2, 2, 2, "valid")).to_floats() == std::vector<float>{5});
  CHECK(run_op("AvgPool2D", {x}, pool_attrs(2, 2, 1, 1, "valid")).to_floats() == std::vector<float>{3, 4, 6, 7});
  // The average gradient spreads dy over the covered elements: the corner window has one.
  Tensor dy = Tensor::from_floats(Shape{1, 2, 2, 1}, std::vector<float>{4, 2, 2, 1});
  CHECK(run_op("AvgPool2DGrad", {dy, x}, pool_attrs(2, 2, 2, 2, "same")).to_floats() ==
        std::vector<float>{1, 1, 1, 1, 1, 1, 1, 1, 1});
}

TEST_CASE("MaxPool2D channels pool separately, and the gradient goes to the first maximum on ties") {
  // Two channels: channel 0 all equal (a tie), channel 1 largest at the last position.
  Tensor x = Tensor::from_floats(Shape{1, 2, 2, 2}, std::vector<float>{7, 1, 7, 2, 7, 3, 7, 4});
  CHECK(run_op("MaxPool2D", {x}, pool_attrs(2, 2, 2, 2, "valid")).to_floats() == std::vector<float>{7, 4});
  Tensor dy = Tensor::from_floats(Shape{1, 1, 1, 2}, std::vector<float>{10, 20});
  CHECK(run_op("MaxPool2DGrad", {dy, x}, pool_attrs(2, 2, 2, 2, "valid")).to_floats() ==
        std::vector<float>{10, 0, 0, 0, 0, 0, 0, 20});
  // Overlapping windows (stride 1) add up at a shared maximum.
  Tensor y = Tensor::from_floats(Shape{1, 1, 3, 1}, std::vector<float>{0, 5, 1});
  Tensor dy2 = Tensor::from_floats(Shape{1, 1, 2, 1}, std::vector<float>{1, 2});
  CHECK(run_op("MaxPool2DGrad", {dy2, y}, pool_attrs(1, 2, 1, 1, "valid")).to_floats() == std::vector<float>{0, 3, 0});
}

TEST_CASE("MaxPool2DGrad with a NaN in the window: a later NaN is passed over, a first NaN takes the gradient") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor dy = Tensor::from_floats(Shape{1, 1, 1, 1}, std::vector<float>{5});
  for (const auto& [strides, label] : {std::pair{2, "windows apart"}, std::pair{1, "the overlapping-window path"}}) {
    CAPTURE(label);
    Tensor later = Tensor::from_floats(Shape{1, 2, 2, 1}, std::vector<float>{1, nan, 3, 2});
    CHECK(run_op("MaxPool2DGrad", {dy, later}, pool_attrs(2, 2, strides, strides, "valid")).to_floats() ==
          std::vector<float>{0, 0, 5, 0});
    Tensor first = Tensor::from_floats(Shape{1, 2, 2, 1}, std::vector<float>{nan, 1, 3, 2});
    CHECK(run_op("MaxPool2DGrad", {dy, first}, pool_attrs(2, 2, strides, strides, "valid")).to_floats() ==
          std::vector<float>{5, 0, 0, 0});
  }
}

TEST_CASE("the 2x2 pool on whole vectors of channels: the general loops' values, ties, zeros and NaNs included") {
  // 32 channels (whole vectors at every width) of values drawn from a few, so windows tie; NaNs and both
  // zeros among them, and even channels drawn from -1 and the two zeros alone, so their maxima tie +0 with
  // -0. The reference is the general loops' rule written out: the forward keeps y = (y < v ? v : y) from
  // -infinity over the window in scan order, the gradient goes to the first element no later one beats by
  // a strict >, as 0 + dy.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> values{-1.0f, 0.0f, -0.0f, 1.0f, 2.0f, nan};
  const Shape shape{3, 4, 6, 32};
  std::vector<float> xv(static_cast<std::size_t>(shape.num_elements())), dyv(xv.size() / 4);
  std::mt19937 rng(5);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = values[rng() % (i % 2 == 0 ? 3 : values.size())];
  for (std::size_t i = 0; i < dyv.size(); ++i) dyv[i] = i % 9 == 0 ? -0.0f : static_cast<float>(i % 13) - 6.0f;
  const Tensor x = Tensor::from_floats(shape, xv);
  const Tensor dy = Tensor::from_floats(Shape{3, 2, 3, 32}, dyv);
  const Attrs attrs = pool_attrs(2, 2, 2, 2, "valid");
  const std::vector<float> y = run_op("MaxPool2D", {x}, attrs, 2).to_floats();
  const std::vector<float> dx = run_op("MaxPool2DGrad", {dy, x}, attrs, 2).to_floats();
  std::vector<float> want_dx(xv.size(), 0.0f);
  auto same = [](float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; };
  int mismatches = 0;
  for (std::int64_t n = 0; n < 3; ++n)
    for (std::int64_t oh = 0; oh < 2; ++oh)
      for (std::int64_t ow = 0; ow < 3; ++ow)
        for (std::int64_t c = 0; c < 32; ++c) {
          float want = -std::numeric_limits<float>::infinity(), best = 0.0f;
          std::size_t best_at = 0;
          for (std::int64_t k = 0; k < 4; ++k) {
            const std::size_t at = static_cast<std::size_t>(((n * 4 + 2 * oh + k / 2) * 6 + 2 * ow + k % 2) * 32 + c);
            want = want < xv[at] ? xv[at] : want;
            if (k == 0 || xv[at] > best) best = xv[at], best_at = at;
          }
          const std::size_t pixel = static_cast<std::size_t>(((n * 2 + oh) * 3 + ow) * 32 + c);
          want_dx[best_at] = 0.0f + dyv[pixel];
          mismatches += !same(y[pixel], want);
        }
  CHECK(mismatches == 0);
  for (std::size_t i = 0; i < dx.size(); ++i) mismatches += !same(dx[i], want_dx[i]);
  CHECK(mismatches == 0);
}

TEST_CASE("pooling shape errors name the node") {
  Graph g;
  Output x = g.placeholder("x", DType::kF32, Shape{-1, 3, 4, 2});
  try {
    g.add("MaxPool2D", {x}, pool_attrs(4, 4, 1, 1, "valid"));
    FAIL("expected a ShapeError");
  } catch (const ShapeError& e) {
    const std::string m = e.what();
    CHECK(m.find("MaxPool2D") != std::string::npos);
    CHECK(m.find("pool 4x4 is larger than the input [?, 3, 4, 2]") != std::string::npos);
  }
  CHECK_THROWS_AS(g.add("AvgPool2D", {x}, pool_attrs(0, 2, 1, 1, "valid")), ShapeError);
  CHECK(g.spec(g.add("AvgPool2D", {x}, pool_attrs(4, 4, 2, 3, "same"))).shape == Shape{-1, 2, 2, 2});
}

TEST_CASE("MaxPool2DGrad with a stride past its window gives 0 to the elements no window covers") {
  // Windows of 2 every 3 elements leave row and column 2 of a 5x5 input uncovered. A dirty buffer before each
  // call, for an output whose uncovered elements were never written would show what it held.
  const Tensor x = testing::random_tensor(Shape{1, 5, 5, 1}, 7);
  const Tensor dy = Tensor::from_floats(Shape{1, 2, 2, 1}, std::vector<float>{1, 2, 3, 4});
  const Attrs attrs{{"window", std::vector<std::int64_t>{2, 2}},
                    {"strides", std::vector<std::int64_t>{3, 3}},
                    {"padding", std::string("valid")}};
  for (int i = 0; i < 3; ++i) {
    (void)run_op("Mul", {Tensor::filled(Shape{1, 5, 5, 1}, 7.0f), Tensor::filled(Shape{1, 5, 5, 1}, 1.0f)}, {});
    const std::vector<float> dx = run_op("MaxPool2DGrad", {dy, x}, attrs).to(cpu_device()).to_floats();
    float total = 0;
    for (int k = 0; k < 5; ++k) {
      CHECK(dx[static_cast<std::size_t>(2 * 5 + k)] == 0.0f);  // row 2
      CHECK(dx[static_cast<std::size_t>(k * 5 + 2)] == 0.0f);  // column 2
    }
    for (const float v : dx) total += v;
    CHECK(total == 10.0f);
  }
}
