// Metrics: a batch's sums of the loss and metrics from its scores and labels, and MetricAccumulator, their
// running sums over the batches of an epoch or an evaluation, safe to feed from several threads at once (each
// add is one locked update, never a lost one).
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "models/data/dataset.h"

namespace tctl {

// Named values in display order, loss first: {"loss", 0.12}, {"accuracy", 0.97}.
using MetricValues = std::vector<std::pair<std::string, double>>;

// The sums one batch contributes.
struct BatchSums {
  double loss = 0.0;           // sum of per-example losses
  double correct = 0.0;        // examples classified right
  double top_k_correct = 0.0;  // examples whose label is among the kTopK most probable classes
  double abs_error = 0.0;      // regression: sum |prediction - target|
  double sq_error = 0.0;       // regression: sum (prediction - target)^2
  std::int64_t examples = 0;
  std::int64_t values = 0;  // regression: predicted values
};

// Adds every field of `b` into `into`.
BatchSums& operator+=(BatchSums& into, const BatchSums& b);

// k of the top_k_accuracy metric (Keras' default for top-k categorical accuracy).
inline constexpr int kTopK = 5;

// Whether class `label` is among the kTopK highest of a row's `width` scores: fewer than kTopK classes score
// strictly higher (a tie counts in the label's favour, as Keras' in_top_k does).
inline bool in_top_k(const float* row, std::int64_t width, std::int64_t label) {
  std::int64_t above = 0;
  for (std::int64_t j = 0; j < width; ++j) above += row[j] > row[label] ? 1 : 0;
  return above < kTopK;
}

class MetricAccumulator {
 public:
  void add(const BatchSums& b);
  // Averages so far: "loss" first, then each of `metrics` ("accuracy", "top_k_accuracy", "mae", "mse") in
  // order.
  MetricValues averages(const std::vector<std::string>& metrics) const;
  std::int64_t examples() const;

 private:
  mutable std::mutex mu_;
  BatchSums sums_ TCTL_GUARDED_BY(mu_);
};

// The averages of plain sums (an interrupted epoch's go into the checkpoint as such).
MetricValues averages(const BatchSums& sums, const std::vector<std::string>& metrics);

// Adds the metric sums of one batch's metric scores (LossOutputs::scores) against the labels of `rows` of
// `data` into `sums`, and its examples. A classification's accuracy and top-k read only the order of a row's
// scores: its logits give the order its softmax gives, save where the softmax rounds scores apart to the same
// float (a saturated row: two probabilities equal at the top, or underflowed to 0), where the logits keep them
// apart.
void add_metric_sums(const Tensor& scores, const Dataset& data, std::span<const std::int64_t> rows,
                     const std::string& loss, BatchSums& sums);

}  // namespace tctl
