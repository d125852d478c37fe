// Portable random numbers from std::mt19937_64, whose output sequence the standard fixes: the same seed
// gives the same floats with every compiler and standard library (std::uniform_real_distribution and
// std::normal_distribution pick their algorithms per library).
#pragma once

#include <cmath>
#include <numbers>
#include <random>

namespace tctl {

// 53 random bits scaled into [0, 1): exact in double.
inline double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Box-Muller: a standard normal from u1 in (0, 1] and u2 in [0, 1). Callers keep how they draw u1 (each
// stream's numbers are part of reproducible runs).
inline double box_muller(double u1, double u2) {
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace tctl
