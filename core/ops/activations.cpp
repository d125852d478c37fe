// Activations and their gradients: ReLU, leaky ReLU, ELU, GELU, sigmoid, tanh, softmax. Each gradient is
// its own op taking (dy, z), where z is the forward input or output as its formula needs.
#include "core/ops/activations.h"
#include "core/ops/ops.h"

#include "core/autodiff.h"

namespace tctl {
namespace {

TensorSpec float_input(const InferContext& c) {
  c.expect_dtype(0, DType::kF32);
  return c.input(0);
}

TensorSpec softmax_infer(const InferContext& c) {
  c.expect_dtype(0, DType::kF32);
  if (c.shape(0).rank() < 1) c.fail("softmax needs at least one dimension");
  return c.input(0);
}

}  // namespace

const std::vector<std::string>& activation_names() {
  static const std::vector<std::string> names{"elu",  "gelu",    "leaky_relu", "linear",
                                              "relu", "sigmoid", "softmax",    "tanh"};
  return names;
}

bool fusable_activation(std::string_view name) { return name == "relu" || name == "linear"; }

void define_activations_ops() {
  register_op({.name = "Relu", .infer = float_input, .grad = [](GradBuilder& g) {
                 return std::vector<Output>{g.op("ReluGrad", {g.dy(), g.x(0)})};
               }});
  register_op({.name = "ReluGrad", .num_inputs = 2, .infer = same_shape_inputs()});
  register_op({.name = "LeakyRelu", .infer = float_input, .grad = [](GradBuilder& g) {
                 return std::vector<Output>{g.op("LeakyReluGrad", {g.dy(), g.x(0)}, g.attrs())};
               }});
  register_op({.name = "LeakyReluGrad", .num_inputs = 2, .infer = same_shape_inputs()});
  register_op({.name = "Elu", .infer = float_input, .grad = [](GradBuilder& g) {
                 return std::vector<Output>{g.op("EluGrad", {g.dy(), g.x(0)}, g.attrs())};
               }});
  register_op({.name = "EluGrad", .num_inputs = 2, .infer = same_shape_inputs()});
  register_op({.name = "Gelu", .infer = float_input, .grad = [](GradBuilder& g) {
                 return std::vector<Output>{g.op("GeluGrad", {g.dy(), g.x(0)})};
               }});
  register_op({.name = "GeluGrad", .num_inputs = 2, .infer = same_shape_inputs()});
  register_op({.name = "Sigmoid", .infer = float_input, .grad = [](GradBuilder& g) {
                 return std::vector<Output>{g.op("SigmoidGrad", {g.dy(), g.y()})};
               }});
  register_op({.name = "SigmoidGrad", .num_inputs = 2, .infer = same_shape_inputs()});
  register_op({.name = "Tanh", .infer = float_input, .grad = [](GradBuilder& g) {
                 return std::vector<Output>{g.op("TanhGrad", {g.dy(), g.y()})};
               }});
  register_op({.name = "TanhGrad", .num_inputs = 2, .infer = same_shape_inputs()});
  register_op({.name = "Softmax", .infer = softmax_infer, .grad = [](GradBuilder& g) {
                 return std::vector<Output>{g.op("SoftmaxGrad", {g.dy(), g.y()})};
               }});
  register_op({.name = "SoftmaxGrad", .num_inputs = 2, .infer = same_shape_inputs()});
}

}  // namespace tctl
