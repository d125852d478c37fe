// Limits on what a spec may ask for, checked before anything is allocated, so a typo in a shape is a clear
// error instead of an overflow, an allocation failure or the kernel's out-of-memory killer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/shape.h"

namespace tctl {

// The largest tensor one example may produce or a layer may own, in elements: 2^36 (256 GiB of floats), far
// past any real model. Every shape a spec leads to stays under it, so sizes computed from shapes (element
// counts, byte counts, batch times example) fit in 64 bits.
inline constexpr std::int64_t kMaxTensorElements = std::int64_t{1} << 36;

// The element count of `shape` when it is known, does not overflow and is at most kMaxTensorElements;
// nullopt otherwise.
std::optional<std::int64_t> bounded_num_elements(const Shape& shape);

// "about 1.8e+19": the element count of a shape too large for bounded_num_elements, for messages
// (computed in floating point, so it never wraps to a negative number).
std::string approximate_num_elements(const Shape& shape);

// How many bytes a model may take: TENSORCTL_MEMORY_LIMIT (bytes, or with a K/M/G/T suffix in either case,
// powers of 1024) when set and not empty, else the lowest of this machine's physical memory, the process's
// address-space limit and its control group's memory limit (cgroup v1 or v2). Throws SpecError naming
// TENSORCTL_MEMORY_LIMIT when it is set to anything else (1.5G, 1GB, 0).
std::int64_t memory_limit_bytes();

// "23.45 GB", "512.00 B": powers of 1024 with the unit names Keras prints in its summary.
std::string byte_size_text(double bytes);

// The bytes a model's weights ask for, counted as layers build. A model is built twice: first with `allocate`
// false, where layers count their variables and allocate nothing (Layer::add_variable returns nullptr), so
// the whole model is checked against the limit before anything is allocated; then for real.
// Not thread-safe: one per model being built.
struct MemoryBudget {
  std::int64_t limit_bytes = 0;
  bool allocate = false;
  std::int64_t weight_bytes = 0;
  bool exceeded() const { return weight_bytes > limit_bytes; }
};

}  // namespace tctl
