// MetricAccumulator: running sums of the loss and metrics over the batches of an epoch, safe to feed from
// several training threads at once (each add is one locked update, never a lost one).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/errors.h"

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

}  // namespace tctl
