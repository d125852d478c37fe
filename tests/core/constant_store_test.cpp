// The compiler as this build drives it stores constant arrays as they are written. g++ 12 with AVX-512 built
// a 256- or 512-bit constant whose top 64-bit words are zero and whose other words are equal by broadcasting
// one word: {1, 1, 1, 1, 1, 1, 0, 0} as eight floats became eight 1s (found by metric_accumulator_test's
// tie case on an AVX-512 EPYC). CMakeLists.txt turns off the move that broadcast uses for g++ 12 with
// AVX-512; these are the shapes that went wrong, each read back through volatile loads so that the compiler
// cannot fold the sum from the constant it meant to store.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace {

template <class T>
T stored_sum(const std::vector<T>& values) {
  T sum{};
  for (std::size_t i = 0; i < values.size(); ++i) sum += *static_cast<const volatile T*>(&values[i]);
  return sum;
}

}  // namespace

TEST_CASE("constant arrays with zero tails are stored as written") {
  CHECK(stored_sum(std::vector<float>{1, 1, 1, 1, 1, 1, 0, 0}) == 6.0f);
  CHECK(stored_sum(std::vector<std::int32_t>{3, 3, 3, 3, 3, 3, 0, 0}) == 18);
  CHECK(stored_sum(std::vector<double>{2, 2, 2, 0}) == 6.0);
  CHECK(stored_sum(std::vector<float>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0}) == 14.0f);
  CHECK(stored_sum(std::vector<std::int64_t>{7, 7, 7, 7, 7, 7, 0, 0}) == 42);
}
