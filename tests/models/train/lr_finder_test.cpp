// The learning-rate range test (models/train/lr_finder.h): its suggestion is the steepest fall of the
// smoothed loss, and on a real model the rates rise exponentially until the loss diverges.
#include "models/train/lr_finder.h"

#include <doctest/doctest.h>

#include <cmath>

namespace tctl {
namespace {

TEST_CASE("steepest_descent finds the steepest fall against the log of the rate, skipping the ends") {
  std::vector<LrFindPoint> points;
  // Flat, then falling fastest around point 12, then flat, then a steep fall at the very end (skipped).
  for (int i = 0; i < 20; ++i) {
    const double rate = std::pow(10.0, -6 + 0.25 * i);
    const double loss = i < 19 ? 2.0 - std::tanh((i - 12) / 2.0) : -50.0;
    points.push_back({rate, loss, loss});
  }
  CHECK(steepest_descent(points) == 12);
  // A loss that only rises has no suggestion; too few points neither.
  for (LrFindPoint& p : points) p.smoothed = p.learning_rate;
  CHECK(steepest_descent(points) == -1);
  points.resize(4);
  CHECK(steepest_descent(points) == -1);
}

TEST_CASE("the range test raises the rate exponentially and stops once the loss diverges") {
  const nlohmann::json spec = nlohmann::json::parse(R"({"input_shape": [2], "layers": [
    {"type": "Dense", "units": 8, "activation": "relu"}, {"type": "Dense", "units": 1}]})");
  ModelOptions o;
  o.loss = "mse";
  o.metrics = {};
  o.optimizer.type = "sgd";
  o.optimizer.learning_rate = 1e-4;
  o.inter_op_threads = 1;
  o.intra_op_threads = 1;
  Model model(std::make_shared<Sequential>(Sequential::from_json(spec, "m.json", "", 2)), o);
  std::vector<float> x, y;
  for (int i = 0; i < 64; ++i) {
    const float a = std::sin(static_cast<float>(i)), b = std::cos(static_cast<float>(3 * i));
    x.insert(x.end(), {a, b});
    y.push_back(2 * a - b);
  }
  Dataset train;
  train.x = Tensor::from_floats(Shape{64, 2}, x);
  train.y = Tensor::from_floats(Shape{64, 1}, y);
  const LrFindResult r = find_learning_rate(model, train, 16, {.start = 1e-4, .end = 1e3, .steps = 60});
  REQUIRE(r.points.size() >= 10);
  CHECK(r.diverged);
  CHECK(r.points.size() < 60);
  CHECK(r.points[0].learning_rate == doctest::Approx(1e-4));
  // Each rate the one before times (1e3 / 1e-4)^(1/59).
  CHECK(r.points[1].learning_rate / r.points[0].learning_rate == doctest::Approx(std::pow(1e7, 1.0 / 59)));
  REQUIRE(r.suggested > 0);
  CHECK(r.points[static_cast<std::size_t>(r.lowest)].smoothed < r.points[0].smoothed);
}

}  // namespace
}  // namespace tctl
