// Losses by their Keras names, added to a graph after the model's predictions.
#pragma once

#include <string>
#include <vector>

#include "core/graph.h"

namespace tctl {

// "sparse_categorical_crossentropy", "categorical_crossentropy", "mse".
const std::vector<std::string>& loss_names();
bool loss_is_classification(const std::string& loss);
// The targets a loss expects for predictions of shape [batch, ...out]: int32 [batch] class labels for
// the sparse loss, float32 [batch, ...out] otherwise.
TensorSpec loss_target_spec(const std::string& loss, const Shape& prediction_shape);

struct LossOutputs {
  Output per_example;  // [batch]
  Output mean;         // scalar
};

// Cross-entropy after a softmax output is computed from the softmax's input by one fused, numerically
// stable op (as Keras does); after a linear output the predictions are taken as logits. Returns an
// empty message on success, or why the model's output does not suit the loss.
std::string check_loss_fits(const Graph& g, const std::string& loss, Output predictions);
LossOutputs build_loss(Graph& g, const std::string& loss, Output predictions, Output targets);

}  // namespace tctl
