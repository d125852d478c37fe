// Elementwise arithmetic: Add, Sub, Mul, Scale, AddN, ZerosLike, and the bias add of a dense layer with its
// gradient.
#include "core/ops/ops.h"

#include "core/autodiff.h"

namespace tctl {
namespace {

TensorSpec bias_add_infer(const InferContext& c) {
  c.expect_rank(1, 1);
  if (c.shape(0).rank() < 1) c.fail("input must have at least one dimension");
  std::int64_t features = c.shape(0)[c.shape(0).rank() - 1];
  if (features >= 0 && c.shape(1)[0] >= 0 && features != c.shape(1)[0])
    c.fail("bias of shape " + c.shape(1).to_string() + " does not fit input " + c.shape(0).to_string());
  return c.input(0);
}

TensorSpec bias_add_grad_infer(const InferContext& c) {
  const Shape& s = c.shape(0);
  return {DType::kF32, Shape{s[s.rank() - 1]}};
}

}  // namespace

void define_elementwise_ops() {
  register_op({.name = "Add", .num_inputs = 2, .infer = same_shape_inputs(), .grad = [](GradBuilder& g) {
                 return std::vector<Output>{g.dy(), g.dy()};
               }});
  register_op({.name = "Sub", .num_inputs = 2, .infer = same_shape_inputs(), .grad = [](GradBuilder& g) {
                 return std::vector<Output>{g.dy(), g.op("Scale", {g.dy()}, Attrs{{"factor", -1.0}})};
               }});
  register_op({.name = "Mul", .num_inputs = 2, .infer = same_shape_inputs(), .grad = [](GradBuilder& g) {
                 return std::vector<Output>{g.op("Mul", {g.dy(), g.x(1)}), g.op("Mul", {g.dy(), g.x(0)})};
               }});
  register_op({.name = "Scale", .infer = same_as_input(0), .grad = [](GradBuilder& g) {
                 return std::vector<Output>{g.op("Scale", {g.dy()}, Attrs{{"factor", g.attrs().f("factor")}})};
               }});
  register_op({.name = "AddN", .num_inputs = -1, .infer = same_shape_inputs(), .grad = [](GradBuilder& g) {
                 return std::vector<Output>(g.graph().node(g.y()).inputs.size(), g.dy());
               }});
  register_op({.name = "ZerosLike", .infer = same_as_input(0)});
  register_op({.name = "BiasAdd", .num_inputs = 2, .infer = bias_add_infer, .grad = [](GradBuilder& g) {
                 return std::vector<Output>{g.dy(), g.op("BiasAddGrad", {g.dy()})};
               }});
  register_op({.name = "BiasAddGrad", .infer = bias_add_grad_infer});
}

}  // namespace tctl
