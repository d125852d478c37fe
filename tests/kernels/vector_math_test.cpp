// The vector exp, sigmoid and tanh of kernels/cpu/vector_math.h against libm in double precision, over the
// ranges the recurrent cells feed them, ends and tails included.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/vector_math.h"

namespace tctl::cpu {
namespace {

// The largest error of fn over [lo, hi] in `count` points, relative to max(|reference|, floor).
template <class Vector, class Reference>
double worst_error(Vector fn, Reference reference, double lo, double hi, int count, double floor) {
  std::vector<float> xs(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i)
    xs[static_cast<std::size_t>(i)] = static_cast<float>(lo + (hi - lo) * i / (count - 1));
  std::vector<float> ys = xs;
  apply_vector(ys.data(), count, fn);
  double worst = 0.0;
  for (int i = 0; i < count; ++i) {
    const double want = reference(static_cast<double>(xs[static_cast<std::size_t>(i)]));
    worst = std::max(worst, std::abs(ys[static_cast<std::size_t>(i)] - want) / std::max(std::abs(want), floor));
  }
  return worst;
}

TEST_CASE("vector exp is within 2 float ulp of exp over [-87, 88]") {
  const double ulp = std::ldexp(1.0, -23);
  CHECK(worst_error(
            vector_exp, [](double x) { return std::exp(x); }, -87.0, 88.0, 100003, 0.0) <= 2 * ulp);
  CHECK(worst_error(
            vector_exp, [](double x) { return std::exp(x); }, -1.0, 1.0, 10007, 0.0) <= 2 * ulp);
}

TEST_CASE("vector sigmoid and tanh are within 3e-7 relative, 1e-7 absolute near their zeros") {
  auto sigmoid = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  CHECK(worst_error(vector_sigmoid, sigmoid, -30.0, 30.0, 100003, 1e-30) <= 3e-7);
  CHECK(worst_error(
            vector_tanh, [](double x) { return std::tanh(x); }, -20.0, 20.0, 100003, 0.0) <= 3e-7);
  // Near 0, where the polynomial takes over from 1 - 2 / (e^2x + 1), and across the switch at 0.4.
  CHECK(worst_error(
            vector_tanh, [](double x) { return std::tanh(x); }, -0.5, 0.5, 100001, 0.0) <= 3e-7);
  CHECK(worst_error(
            vector_tanh, [](double x) { return std::tanh(x); }, -1e-6, 1e-6, 1001, 0.0) <= 3e-7);
}

TEST_CASE("vector tanh and sigmoid saturate without NaN far out") {
  std::vector<float> v{-1e30f, -200.0f, 200.0f, 1e30f, 0.0f};
  std::vector<float> s = v;
  tanh_in_place(v.data(), static_cast<std::int64_t>(v.size()));
  CHECK(v == std::vector<float>{-1.0f, -1.0f, 1.0f, 1.0f, 0.0f});
  sigmoid_in_place(s.data(), static_cast<std::int64_t>(s.size()));
  CHECK(s[0] == doctest::Approx(0.0));
  CHECK(s[3] == 1.0f);
  CHECK(s[4] == 0.5f);
}

}  // namespace
}  // namespace tctl::cpu
