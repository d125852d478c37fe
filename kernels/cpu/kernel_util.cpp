#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {

InferFn same_shape_inputs() {
  return [](const InferContext& c) {
    for (int i = 1; i < c.num_inputs(); ++i) {
      if (!c.shape(i).compatible(c.shape(0)) || c.input(i).dtype != c.input(0).dtype)
        c.fail("input " + std::to_string(i) + " has shape " + c.shape(i).to_string() + " but input 0 has " +
               c.shape(0).to_string());
    }
    return c.input(0);
  };
}

bool fused_relu(const Attrs& attrs) {
  const std::string& activation = attrs.s("activation");
  TCTL_CHECK(activation == "relu" || activation == "linear", "a fused op cannot apply activation " + activation);
  return activation == "relu";
}

void add_bias_activation(float* y, std::int64_t ld, std::int64_t rows, std::int64_t cols, const float* bias, bool relu) {
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

InferFn fused_infer(InferFn product, std::string what) {
  return [product = std::move(product), what = std::move(what)](const InferContext& c) {
    fused_relu(c.attrs());
    const TensorSpec y = product(c);
    c.expect_rank(2, 1);
    c.expect_dtype(2, DType::kF32);
    const std::int64_t features = y.shape[y.shape.rank() - 1];
    if (features >= 0 && c.shape(2)[0] >= 0 && features != c.shape(2)[0])
      c.fail("bias of shape " + c.shape(2).to_string() + " does not fit the " + std::to_string(features) + " " + what);
    return y;
  };
}

}  // namespace tctl::cpu
