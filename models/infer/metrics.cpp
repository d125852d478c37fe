#include "models/infer/metrics.h"

#include <algorithm>
#include <cmath>

#include "models/nn/losses.h"

namespace tctl {

BatchSums& operator+=(BatchSums& into, const BatchSums& b) {
  into.loss += b.loss;
  into.correct += b.correct;
  into.top_k_correct += b.top_k_correct;
  into.abs_error += b.abs_error;
  into.sq_error += b.sq_error;
  into.examples += b.examples;
  into.values += b.values;
  return into;
}

void MetricAccumulator::add(const BatchSums& b) {
  std::lock_guard lock(mu_);
  sums_ += b;
}

std::int64_t MetricAccumulator::examples() const {
  std::lock_guard lock(mu_);
  return sums_.examples;
}

MetricValues MetricAccumulator::averages(const std::vector<std::string>& metrics) const {
  BatchSums s;
  {
    std::lock_guard lock(mu_);
    s = sums_;
  }
  auto ratio = [](double a, std::int64_t n) { return n ? a / static_cast<double>(n) : 0.0; };
  MetricValues out{{"loss", ratio(s.loss, s.examples)}};
  for (const auto& m : metrics) {
    if (m == "accuracy") out.emplace_back(m, ratio(s.correct, s.examples));
    if (m == "top_k_accuracy") out.emplace_back(m, ratio(s.top_k_correct, s.examples));
    if (m == "mae") out.emplace_back(m, ratio(s.abs_error, s.values));
    if (m == "mse") out.emplace_back(m, ratio(s.sq_error, s.values));
  }
  return out;
}

MetricValues averages(const BatchSums& sums, const std::vector<std::string>& metrics) {
  MetricAccumulator accumulator;
  accumulator.add(sums);
  return accumulator.averages(metrics);
}

void add_metric_sums(const Tensor& pred, const Dataset& data, std::span<const std::int64_t> rows,
                     const std::string& loss, BatchSums& sums) {
  const auto b = static_cast<std::int64_t>(rows.size());
  const std::int64_t width = pred.num_elements() / std::max<std::int64_t>(b, 1);
  const float* p = pred.data<float>();
  if (loss_is_classification(loss)) {
    for (std::int64_t i = 0; i < b; ++i) {
      const std::int64_t label = data.y.data<std::int32_t>()[rows[static_cast<std::size_t>(i)]];
      const float* row = p + i * width;
      sums.correct += std::max_element(row, row + width) - row == label ? 1.0 : 0.0;
      sums.top_k_correct += in_top_k(row, width, label) ? 1.0 : 0.0;
    }
  } else {
    const bool binary = loss_is_binary(loss);
    for (std::int64_t i = 0; i < b; ++i) {
      const float* t = data.y.data<float>() + rows[static_cast<std::size_t>(i)] * width;
      for (std::int64_t j = 0; j < width; ++j) {
        const double d = static_cast<double>(p[i * width + j]) - t[j];
        sums.abs_error += std::abs(d);
        sums.sq_error += d * d;
        // Binary accuracy (Keras' threshold 0.5), averaged over the outputs of a row.
        if (binary) sums.correct += ((p[i * width + j] > 0.5f) == (t[j] > 0.5f)) / static_cast<double>(width);
      }
    }
    sums.values = b * width;
  }
  sums.examples = b;
}

}  // namespace tctl
