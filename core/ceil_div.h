// Integer division rounded up, for counts of batches, blocks and tiles.
#pragma once

#include <cstdint>

namespace tctl {

// ceil(n / d) for n >= 0 and d >= 1, without forming n + d - 1: that sum wraps for a divisor near 2^63 (a
// --batch-size of 9223372036854775807 once made evaluate count zero batches and print zeros).
constexpr std::int64_t ceil_div(std::int64_t n, std::int64_t d) { return n / d + (n % d != 0 ? 1 : 0); }

}  // namespace tctl
