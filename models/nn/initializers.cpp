#include "models/nn/initializers.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/errors.h"
#include "core/random.h"

namespace tctl {

namespace {
// A draw of u1 below 1e-300 (never seen in practice) is raised to it, keeping log finite.
double standard_normal(std::mt19937_64& rng) {
  const double u1 = uniform01(rng), u2 = uniform01(rng);
  return box_muller(u1 < 1e-300 ? 1e-300 : u1, u2);
}

// Keras' Orthogonal (gain 1): the shape seen as a matrix of rows = every dimension but the last and cols =
// the last; a normal matrix of max(rows, cols) x min(rows, cols) made orthonormal by Gram-Schmidt on its
// columns (Q of its QR with R's diagonal positive, as Keras' sign correction makes it), transposed when the
// matrix is wide. An LSTM's recurrent kernel [H, 4 H] gets orthonormal rows.
void orthogonal(float* p, std::int64_t rows, std::int64_t cols, std::mt19937_64& rng) {
  const std::int64_t tall = std::max(rows, cols), narrow = std::min(rows, cols);
  std::vector<double> q(static_cast<std::size_t>(tall * narrow));  // column-major: column j at q[j * tall]
  for (auto& v : q) v = standard_normal(rng);
  for (std::int64_t j = 0; j < narrow; ++j) {
    double* col = q.data() + j * tall;
    for (std::int64_t i = 0; i < j; ++i) {
      const double* prev = q.data() + i * tall;
      double dot = 0.0;
      for (std::int64_t r = 0; r < tall; ++r) dot += prev[r] * col[r];
      for (std::int64_t r = 0; r < tall; ++r) col[r] -= dot * prev[r];
    }
    double norm = 0.0;
    for (std::int64_t r = 0; r < tall; ++r) norm += col[r] * col[r];
    norm = std::sqrt(norm);
    for (std::int64_t r = 0; r < tall; ++r) col[r] = norm > 0.0 ? col[r] / norm : 0.0;
  }
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      p[r * cols + c] = static_cast<float>(rows >= cols ? q[static_cast<std::size_t>(c * tall + r)]
                                                        : q[static_cast<std::size_t>(r * tall + c)]);
}
}  // namespace

const std::vector<std::string>& initializer_names() {
  static const std::vector<std::string> names{"glorot_uniform", "he_normal", "orthogonal", "uniform", "zeros"};
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
  if (name == "orthogonal" && shape.rank() >= 1 && t.num_elements() > 0) {
    const std::int64_t cols = shape[shape.rank() - 1];
    orthogonal(p, t.num_elements() / cols, cols, rng);
    return t;
  }
  TCTL_CHECK(name == "orthogonal", "initializer not validated: " + name);
  return t;
}

}  // namespace tctl
