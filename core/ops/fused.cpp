#include "core/ops/fused.h"

#include "core/errors.h"
#include "core/ops/activations.h"

namespace tctl {

bool fused_relu(const Attrs& attrs) {
  const std::string& activation = attrs.s("activation");
  TCTL_CHECK(fusable_activation(activation), "a fused op cannot apply activation " + activation);
  return activation == "relu";
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

}  // namespace tctl
