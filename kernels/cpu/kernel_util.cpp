#include "kernels/cpu/kernel_util.h"

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

}  // namespace tctl::cpu
