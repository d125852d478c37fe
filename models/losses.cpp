#include "models/losses.h"

#include "core/errors.h"

namespace tctl {

const std::vector<std::string>& loss_names() {
  static const std::vector<std::string> names{"sparse_categorical_crossentropy", "categorical_crossentropy", "mse"};
  return names;
}

bool loss_is_classification(const std::string& loss) { return loss != "mse"; }

TensorSpec loss_target_spec(const std::string& loss, const Shape& prediction_shape) {
  if (loss == "sparse_categorical_crossentropy") return {DType::kI32, Shape{prediction_shape[0]}};
  return {DType::kF32, prediction_shape};
}

std::string check_loss_fits(const Graph& g, const std::string& loss, Output predictions) {
  if (!loss_is_classification(loss)) return {};
  const Node& out = g.node(predictions);
  if (out.spec.shape.rank() != 2) return "cross-entropy needs a (None, classes) output, got " + out.spec.shape.keras_string();
  const std::string& op = out.op->name;
  if (op == "Relu" || op == "Sigmoid" || op == "Tanh")
    return "cross-entropy needs a softmax or linear output layer, the model ends in " + op;
  return {};
}

LossOutputs build_loss(Graph& g, const std::string& loss, Output predictions, Output targets) {
  LossOutputs out;
  if (loss == "mse") {
    out.per_example = g.add("Mse", {predictions, targets});
  } else {
    const Node& p = g.node(predictions);
    Output logits = p.op->name == "Softmax" ? Output{p.inputs[0]} : predictions;
    out.per_example = g.add(loss == "sparse_categorical_crossentropy" ? "SparseSoftmaxXent" : "SoftmaxXent", {logits, targets});
  }
  out.mean = g.add("Mean", {out.per_example});
  return out;
}

}  // namespace tctl
