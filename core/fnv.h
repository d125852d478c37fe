// 64-bit FNV-1a: a hash that is the same on every platform and run, for data fingerprints, cache keys and the
// config hash a multi-worker run compares across ranks. Not for anything an adversary chooses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tctl {

inline constexpr std::uint64_t kFnvOffset = 14695981039346656037ull;

// `n` bytes at `bytes` folded into the hash `h` (kFnvOffset to start one).
inline std::uint64_t fnv1a(const void* bytes, std::size_t n, std::uint64_t h = kFnvOffset) {
  for (const auto* p = static_cast<const unsigned char*>(bytes); n > 0; --n, ++p) h = (h ^ *p) * 1099511628211ull;
  return h;
}

inline std::uint64_t fnv1a(std::string_view text, std::uint64_t h = kFnvOffset) {
  return fnv1a(text.data(), text.size(), h);
}

}  // namespace tctl
