// Counter-based random numbers: a pure function of (key, index), so any thread, on the CPU or a GPU, draws
// element i of a stream without the ones before it, and every device and thread count gets the same bits.
// Usable in CUDA device code: the functions are __host__ __device__ under nvcc.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define TCTL_HOST_DEVICE __host__ __device__
#else
#define TCTL_HOST_DEVICE
#endif

namespace tctl {

// Mixes 64 bits into 64 well-spread bits (splitmix64's finaliser), in a 64-bit word or in each lane of a GCC
// vector of them (the CPU's dropout mixes a register of lanes at once); the base of every random stream.
template <class Words>
TCTL_HOST_DEVICE constexpr inline Words mix_words(Words x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
TCTL_HOST_DEVICE constexpr inline std::uint64_t mix64(std::uint64_t x) { return mix_words(x); }

// Element i of a stream is mixed from key ^ (i * kStreamStride): consecutive elements' multiples differ by
// the stride, so a loop over them may add it instead of multiplying (mod 2^64 both give the same word).
inline constexpr std::uint64_t kStreamStride = 0x9E3779B97F4A7C15ull;

// The mixed word of element i (or of each lane's element) of the stream with this key: its top 24 bits are
// the element's uniform draw.
template <class Words>
TCTL_HOST_DEVICE constexpr inline Words stream_words(std::uint64_t key, Words i) {
  return mix_words(key ^ (i * kStreamStride));
}

// An element's uniform draw is the top 24 bits of its mixed word, as an integer (uniform_bits) and scaled
// into [0, 1) by kUniformScale: exact in a float, so the same on every device. Vector code converts the
// integers lane by lane and scales them with the same constant. uniform_bits_scaled takes the element's
// index already times kStreamStride.
inline constexpr int kUniformBits = 24;
inline constexpr float kUniformScale = 1.0f / static_cast<float>(1u << kUniformBits);
template <class Words>
TCTL_HOST_DEVICE constexpr inline Words uniform_bits_scaled(std::uint64_t key, Words scaled) {
  return mix_words(key ^ scaled) >> (64 - kUniformBits);
}
template <class Words>
TCTL_HOST_DEVICE constexpr inline Words uniform_bits(std::uint64_t key, Words i) {
  return uniform_bits_scaled(key, i * kStreamStride);
}

// Uniform float in [0, 1) for element i of the stream with this key.
TCTL_HOST_DEVICE constexpr inline float uniform_at(std::uint64_t key, std::uint64_t i) {
  return static_cast<float>(uniform_bits(key, i)) * kUniformScale;
}

}  // namespace tctl
