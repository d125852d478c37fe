#include "kernels/cpu/kernel_util.h"

#include <atomic>
#include <bit>

#include <fmt/format.h>

namespace tctl::cpu {

void add_bias_activation(float* y, std::int64_t ld, std::int64_t rows, std::int64_t cols, const float* bias,
                         bool relu) {
  for (std::int64_t r = 0; r < rows; ++r) {
    float* out = y + r * ld;
    if (relu) {
      for (std::int64_t j = 0; j < cols; ++j) {
        const float v = out[j] + bias[j];
        out[j] = v > 0.0f ? v : 0.0f;
      }
    } else {
      for (std::int64_t j = 0; j < cols; ++j) out[j] = out[j] + bias[j];
    }
  }
}

bool any_non_finite(const KernelContext& ctx, const float* x, std::int64_t n, std::int64_t grain) {
  std::atomic<std::uint32_t> any_bad{0};
  ctx.parallel_for(n, grain, [&](std::int64_t b, std::int64_t e) {
    std::uint32_t bad = 0;
    for (std::int64_t i = b; i < e; ++i) bad |= (std::bit_cast<std::uint32_t>(x[i]) & 0x7f800000u) == 0x7f800000u;
    if (bad != 0) any_bad.store(1, std::memory_order_relaxed);
  });
  return any_bad.load(std::memory_order_relaxed) != 0;
}

std::int64_t table_row(const KernelContext& ctx, float id, std::int64_t i, std::int64_t rows) {
  if (!(id >= 0.0f && id < static_cast<float>(rows)) || id != std::floor(id))
    throw RuntimeError(
        fmt::format("{}: id {} (element {} of its input) is not a whole number in [0, {}), the "
                    "embedding's input_dim",
                    ctx.node().name, id, i, rows));
  return static_cast<std::int64_t>(id);
}

}  // namespace tctl::cpu
