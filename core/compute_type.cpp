#include "core/compute_type.h"

#include <bit>
#include <cmath>
#include <cstdlib>
#include <string_view>

namespace tctl {

std::string_view compute_type_name(ComputeType t) {
  switch (t) {
    case ComputeType::kBF16:
      return "bfloat16";
    case ComputeType::kF16:
      return "float16";
    case ComputeType::kF32:
      break;
  }
  return "float32";
}

namespace {

// bfloat16 is float32's upper half: add half of the dropped part's unit, plus one when the kept part is odd
// (ties to even), and clear the dropped half. NaN keeps its quiet bit, so it cannot round to an infinity.
float round_to_bf16(float x) {
  if (std::isnan(x)) return x;
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
  return std::bit_cast<float>(rounded & 0xffff0000u);
}

// float16 has 10 stored mantissa bits and exponents from -14 (normal) down to -24 (subnormal steps). Within
// the normal range the value keeps 11 significant bits; below it, multiples of 2^-24. Rounding to a step is
// an addition and subtraction of a power of two large enough that float32 rounds (to even) at that step.
float round_to_f16(float x) {
  if (!std::isfinite(x)) return x;
  const float magnitude = std::fabs(x);
  if (magnitude >= 65520.0f) return std::copysign(INFINITY, x);  // halfway past 65504 and beyond: overflow
  int exponent = 0;
  std::frexp(magnitude, &exponent);                            // magnitude = m * 2^exponent, m in [0.5, 1)
  const int step = exponent - 11 < -24 ? -24 : exponent - 11;  // the value of float16's last bit here
  const float shift = std::ldexp(1.0f, step + 23);             // float32's last bit at shift is 2^step
  return std::copysign((magnitude + shift) - shift, x);        // exact: the build allows no reassociation
}

}  // namespace

float round_to(ComputeType t, float x) {
  switch (t) {
    case ComputeType::kBF16:
      return round_to_bf16(x);
    case ComputeType::kF16:
      return round_to_f16(x);
    case ComputeType::kF32:
      break;
  }
  return x;
}

const std::string& cpu_bf16_absence() {
  static const std::string absence = []() -> std::string {
#if defined(TCTL_AS_AVX2)
    return "an AVX2 build";
#elif defined(__x86_64__)
    const char* chosen = std::getenv("TCTL_CPU_BF16");
    if (chosen != nullptr && std::string_view(chosen) == "0") return "TCTL_CPU_BF16=0";
    __builtin_cpu_init();
    const bool has = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
                     __builtin_cpu_supports("avx512vl");
    return has ? "" : "needs AVX-512 BF16";
#else
    return "needs AVX-512 BF16";
#endif
  }();
  return absence;
}

// Read on every MatMul under mixed_bfloat16: a reference to the decided reason, no copy.
bool cpu_bf16_products() { return cpu_bf16_absence().empty(); }

}  // namespace tctl
