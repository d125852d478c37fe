#include "models/nn/losses.h"

#include "core/errors.h"
#include "models/nn/activations.h"

namespace tctl {

const std::vector<std::string>& loss_names() {
  static const std::vector<std::string> names{"sparse_categorical_crossentropy",
                                              "categorical_crossentropy",
                                              "binary_crossentropy",
                                              "mse",
                                              "mean_squared_error",
                                              "mae",
                                              "mean_absolute_error",
                                              "huber"};
  return names;
}

bool loss_is_classification(const std::string& loss) {
  return loss == "sparse_categorical_crossentropy" || loss == "categorical_crossentropy";
}

bool loss_is_binary(const std::string& loss) { return loss == "binary_crossentropy"; }

const std::vector<std::string>& loss_metrics(const std::string& loss) {
  static const std::vector<std::string> classification{"accuracy", "top_k_accuracy"}, binary{"accuracy", "mae", "mse"},
      regression{"mae", "mse"};
  if (loss_is_classification(loss)) return classification;
  return loss_is_binary(loss) ? binary : regression;
}

TensorSpec loss_target_spec(const std::string& loss, const Shape& prediction_shape) {
  if (loss == "sparse_categorical_crossentropy") return {DType::kI32, Shape{prediction_shape[0]}};
  if (prediction_shape.rank() <= 2) return {DType::kF32, prediction_shape};
  // Outputs per step (a Dense on a sequence): the data holds each row's targets flat, [N, steps].
  std::int64_t per_row = 1;
  for (int i = 1; i < prediction_shape.rank(); ++i) per_row *= prediction_shape[i];
  return {DType::kF32, Shape{prediction_shape[0], per_row}};
}

std::string check_loss_fits(const Graph& g, const std::string& loss, Output predictions) {
  const Node& out = g.node(predictions);
  const OutputActivation activation = output_activation(out);
  // A Dense layer on a sequence or an image gives an output per step or pixel, as in Keras.
  const std::string per_step = out.spec.shape.rank() > 2
                                   ? " (one per step or pixel: add a Flatten or a global pooling layer before the "
                                     "last layer)"
                                   : "";
  if (loss_is_binary(loss)) {
    if (out.spec.shape.rank() != 2)
      return "binary_crossentropy needs a (None, units) output, got " + out.spec.shape.keras_string() + per_step;
    if (activation.name != "sigmoid")
      return "binary_crossentropy needs probabilities from a sigmoid output layer, the model ends in " + activation.op;
    return {};
  }
  if (!loss_is_classification(loss)) return {};
  if (out.spec.shape.rank() != 2)
    return "cross-entropy needs a (None, classes) output, got " + out.spec.shape.keras_string() + per_step;
  if (!activation_gives_scores(activation.name))
    return "cross-entropy needs a softmax or linear output layer, the model ends in " + activation.op;
  return {};
}

LossOutputs build_loss(Graph& g, const std::string& loss, Output predictions, Output targets) {
  LossOutputs out;
  // A regression's outputs per step meet their targets flat (loss_target_spec); the mean is the same.
  if (g.spec(predictions).shape.rank() > 2)
    predictions =
        g.add("Reshape", {predictions}, Attrs{{"shape", std::vector<std::int64_t>{g.spec(targets).shape[1]}}});
  out.scores = predictions;
  if (loss == "mse" || loss == "mean_squared_error") {
    out.per_example = g.add("Mse", {predictions, targets});
  } else if (loss == "mae" || loss == "mean_absolute_error") {
    out.per_example = g.add("Mae", {predictions, targets});
  } else if (loss == "huber") {
    out.per_example = g.add("Huber", {predictions, targets}, Attrs{{"delta", 1.0}});
  } else if (loss_is_binary(loss)) {
    out.per_example = g.add("BinaryXent", {predictions, targets}, Attrs{{"epsilon", 1e-7}});
  } else {
    const Node& p = g.node(predictions);
    // Softmax and cross-entropy as one op, on the logits: stable where the probabilities underflow.
    Output logits = output_activation(p).name == "softmax" ? Output{p.inputs[0]} : predictions;
    out.scores = logits;
    out.per_example =
        g.add(loss == "sparse_categorical_crossentropy" ? "SparseSoftmaxXent" : "SoftmaxXent", {logits, targets});
  }
  out.mean = g.add("Mean", {out.per_example});
  return out;
}

}  // namespace tctl
