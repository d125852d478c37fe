#include "models/nn/initializers.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace tctl {
namespace {

struct Moments {
  double mean = 0.0, stddev = 0.0, max_abs = 0.0;
};

Moments moments_of(const Tensor& t) {
  const std::vector<float> v = t.to_floats();
  Moments m;
  for (float x : v) {
    m.mean += x;
    m.max_abs = std::max(m.max_abs, static_cast<double>(std::abs(x)));
  }
  m.mean /= static_cast<double>(v.size());
  for (float x : v) m.stddev += (x - m.mean) * (x - m.mean);
  m.stddev = std::sqrt(m.stddev / static_cast<double>(v.size()));
  return m;
}

TEST_CASE("initializer names") {
  CHECK(initializer_names() ==
        std::vector<std::string>{"glorot_uniform", "he_normal", "orthogonal", "uniform", "zeros"});
}

TEST_CASE("every initializer gives a float32 tensor of the requested shape") {
  for (const std::string& name : initializer_names()) {
    CAPTURE(name);
    Tensor t = initialize(name, Shape{3, 5}, 3, 5, 1);
    CHECK(t.dtype() == DType::kF32);
    CHECK(t.shape() == Shape{3, 5});
    for (float v : t.to_floats()) CHECK(std::isfinite(v));
    Tensor bias = initialize(name, Shape{5}, 3, 5, 1);
    CHECK(bias.shape() == Shape{5});
  }
}

TEST_CASE("zeros") {
  for (float v : initialize("zeros", Shape{4, 4}, 4, 4, 99).to_floats()) CHECK(v == 0.0f);
}

TEST_CASE("initializers are deterministic for a seed and differ across seeds") {
  for (const std::string name : {"glorot_uniform", "he_normal"}) {
    CAPTURE(name);
    CHECK(initialize(name, Shape{8, 8}, 8, 8, 5).to_floats() == initialize(name, Shape{8, 8}, 8, 8, 5).to_floats());
    CHECK(initialize(name, Shape{8, 8}, 8, 8, 5).to_floats() != initialize(name, Shape{8, 8}, 8, 8, 6).to_floats());
  }
}

TEST_CASE("glorot_uniform draws U(-limit, limit) with limit = sqrt(6 / (fan_in + fan_out)), portably") {
  const double limit = std::sqrt(6.0 / (100 + 50));
  Tensor t = initialize("glorot_uniform", Shape{100, 50}, 100, 50, 42);
  Moments m = moments_of(t);
  CHECK(m.max_abs <= limit);
  CHECK(m.max_abs > 0.99 * limit);
  CHECK(std::abs(m.mean) < 0.02 * limit);
  CHECK(m.stddev == doctest::Approx(limit / std::sqrt(3.0)).epsilon(0.03));
  // The values come from mt19937_64, whose sequence the standard fixes, through a documented conversion,
  // so every platform builds the same weights.
  std::mt19937_64 rng(42);
  const std::vector<float> v = t.to_floats();
  for (std::size_t i = 0; i < 4; ++i) {
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    CHECK(v[i] == static_cast<float>((2.0 * u - 1.0) * limit));
  }
}

TEST_CASE("he_normal has standard deviation sqrt(2 / fan_in), truncated at two of its own") {
  const std::int64_t fan_in = 200;
  Tensor t = initialize("he_normal", Shape{fan_in, 100}, fan_in, 100, 7);
  Moments m = moments_of(t);
  CHECK(m.stddev == doctest::Approx(std::sqrt(2.0 / fan_in)).epsilon(0.02));
  CHECK(std::abs(m.mean) < 0.005);
  // Keras truncates the underlying normal at two of its standard deviations.
  const double underlying = std::sqrt(2.0 / fan_in) / 0.87962566103423978;
  CHECK(m.max_abs <= 2.0 * underlying * (1 + 1e-6));
  CHECK(m.max_abs > 1.9 * underlying);
  // fan_out does not matter to he_normal.
  CHECK(initialize("he_normal", Shape{4, 4}, 4, 4, 1).to_floats() ==
        initialize("he_normal", Shape{4, 4}, 4, 9, 1).to_floats());
}

}  // namespace
}  // namespace tctl
