// Losses by their Keras names, added to a graph after the model's predictions.
#pragma once

#include <string>
#include <vector>

#include "core/graph.h"

namespace tctl {

// "sparse_categorical_crossentropy", "categorical_crossentropy", "binary_crossentropy",
// "mean_squared_error" ("mse"), "mean_absolute_error" ("mae"), "huber" (delta 1.0).
const std::vector<std::string>& loss_names();
// True when the data set's targets are int32 class labels (the two categorical cross-entropies).
bool loss_is_classification(const std::string& loss);
// True for binary_crossentropy: float 0/1 targets [N, outputs] (loaded like regression targets), and
// accuracy counts a prediction above 0.5 as 1.
bool loss_is_binary(const std::string& loss);
// The metrics that apply to the loss, the default first: accuracy for classification; accuracy, mae and
// mse for binary cross-entropy; mae and mse for regression.
const std::vector<std::string>& loss_metrics(const std::string& loss);
// The targets a loss expects for predictions of shape [batch, ...out]: int32 [batch] class labels for
// the sparse loss, float32 [batch, ...out] otherwise, flat [batch, out elements] for outputs of more than
// one dimension (a regression per step).
TensorSpec loss_target_spec(const std::string& loss, const Shape& prediction_shape);

struct LossOutputs {
  Output per_example;  // [batch]
  Output mean;         // scalar
  // What accuracy and top-k read: after a softmax, its input (the same order of classes, and no softmax to
  // compute in a training step, which needs only the logits); else the predictions.
  Output scores;
};

// Cross-entropy after a softmax output is computed from the softmax's input by one fused, numerically
// stable op (as Keras does); after a linear output the predictions are taken as logits. Binary
// cross-entropy takes probabilities from a sigmoid output, clipped to [1e-7, 1 - 1e-7] as Keras does.
// Returns an empty message on success, or why the model's output does not suit the loss.
std::string check_loss_fits(const Graph& g, const std::string& loss, Output predictions);
LossOutputs build_loss(Graph& g, const std::string& loss, Output predictions, Output targets);

}  // namespace tctl
