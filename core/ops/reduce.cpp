// Reductions to a scalar (Sum, Mean) and their gradients, which broadcast the scalar back. The gradient
// ops take (dy, x), x for its shape.
#include "core/ops/ops.h"

#include "core/autodiff.h"

namespace tctl {
namespace {

TensorSpec scalar_infer(const InferContext& c) {
  c.expect_dtype(0, DType::kF32);
  return {DType::kF32, Shape{}};
}

TensorSpec like_second(const InferContext& c) { return c.input(1); }

}  // namespace

void define_reduce_ops() {
  register_op({.name = "Sum", .infer = scalar_infer, .grad = [](GradBuilder& g) {
                 return std::vector<Output>{g.op("SumGrad", {g.dy(), g.x(0)})};
               }});
  register_op({.name = "SumGrad", .num_inputs = 2, .infer = like_second});
  register_op({.name = "Mean", .infer = scalar_infer, .grad = [](GradBuilder& g) {
                 return std::vector<Output>{g.op("MeanGrad", {g.dy(), g.x(0)})};
               }});
  register_op({.name = "MeanGrad", .num_inputs = 2, .infer = like_second});
}

}  // namespace tctl
