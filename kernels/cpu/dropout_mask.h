// Dropout's mask drawn and applied a block of elements at a time, for the kernels that drop: Dropout and
// DropoutGrad (kernels/cpu/dropout.cpp), the attention's weights (kernels/cpu/attention.cpp).
#pragma once

#include <cstdint>
#include <cstring>

#include "core/counter_random.h"
#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {

// The mask kMaskLanes elements at a time: stream_words on 64-bit lanes as wide as the target's registers
// (GCC's vector extensions; AVX2, which has no 64-bit multiply, gets it from 32-bit ones), drawn as
// uniform_at draws them (uniform_bits, kUniformScale). A per-element loop was not vectorized (on AVX2 at all, and
// elsewhere not through a lambda holding its scalars by reference) and ran several times slower on the digits
// MLP's 2,048 elements (`tensorctl profile configs/digits_mlp.json --ops`, figures in bench/README.md).
inline constexpr int kMaskLanes = kLanes / 2;
using Words = std::uint64_t __attribute__((vector_size(kMaskLanes * sizeof(std::uint64_t))));
using Draws = std::int32_t __attribute__((vector_size(kMaskLanes * sizeof(std::int32_t))));
using MaskFloats = float __attribute__((vector_size(kMaskLanes * sizeof(float))));

inline void mask_block(const float* x, float* y, std::int64_t begin, std::int64_t end, std::uint64_t key,
                       std::uint64_t first, float rate, float keep_scale) {
  // Each lane's element index times kStreamStride, advanced by addition: AVX2 has no 64-bit multiply, and
  // this saves one of the three that every element's word takes.
  Words scaled{};
  for (int j = 0; j < kMaskLanes; ++j)
    scaled[j] = (first + static_cast<std::uint64_t>(begin) + static_cast<std::uint64_t>(j)) * kStreamStride;
  const std::uint64_t advance = static_cast<std::uint64_t>(kMaskLanes) * kStreamStride;
  std::int64_t i = begin;
  for (; i + kMaskLanes <= end; i += kMaskLanes, scaled += advance) {
    const Words bits = uniform_bits_scaled(key, scaled);
    const MaskFloats u = __builtin_convertvector(__builtin_convertvector(bits, Draws), MaskFloats) * kUniformScale;
    MaskFloats v;
    std::memcpy(&v, x + i, sizeof v);
    const MaskFloats out = u < rate ? MaskFloats{} : v * keep_scale;
    std::memcpy(y + i, &out, sizeof out);
  }
  for (; i < end; ++i) y[i] = uniform_at(key, first + static_cast<std::uint64_t>(i)) < rate ? 0.0f : x[i] * keep_scale;
}

}  // namespace tctl::cpu
