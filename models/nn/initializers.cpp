#include "models/nn/initializers.h"

#include <cmath>
#include <random>

#include "core/errors.h"
#include "core/random.h"

namespace tctl {

namespace {
// A draw of u1 below 1e-300 (never seen in practice) is raised to it, keeping log finite.
double standard_normal(std::mt19937_64& rng) {
  const double u1 = uniform01(rng), u2 = uniform01(rng);
  return box_muller(u1 < 1e-300 ? 1e-300 : u1, u2);
}
}  // namespace

const std::vector<std::string>& initializer_names() {
  static const std::vector<std::string> names{"glorot_uniform", "he_normal", "uniform", "zeros"};
  return names;
}

Tensor initialize(const std::string& name, const Shape& shape, std::int64_t fan_in, std::int64_t fan_out,
                  std::uint64_t seed) {
  Tensor t = Tensor::zeros(DType::kF32, shape);
  float* p = t.mutable_data<float>();
  std::mt19937_64 rng(seed);
  if (name == "zeros") return t;
  if (name == "glorot_uniform") {
    const double limit = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
    for (std::int64_t i = 0; i < t.num_elements(); ++i) p[i] = static_cast<float>((2.0 * uniform01(rng) - 1.0) * limit);
    return t;
  }
  // Keras' "uniform", RandomUniform(-0.05, 0.05): an Embedding's default.
  if (name == "uniform") {
    for (std::int64_t i = 0; i < t.num_elements(); ++i) p[i] = static_cast<float>((2.0 * uniform01(rng) - 1.0) * 0.05);
    return t;
  }
  if (name == "he_normal") {
    // Keras draws from a normal truncated at two standard deviations, widened so the result keeps the
    // variance 2 / fan_in; 0.8796... is the standard deviation of a unit normal truncated that way.
    const double stddev = std::sqrt(2.0 / static_cast<double>(fan_in)) / 0.87962566103423978;
    for (std::int64_t i = 0; i < t.num_elements(); ++i) {
      double z;
      do {
        z = standard_normal(rng);
      } while (std::abs(z) > 2.0);
      p[i] = static_cast<float>(z * stddev);
    }
    return t;
  }
  TCTL_CHECK(false, "initializer not validated: " + name);
}

}  // namespace tctl
