#include "models/train/metric_accumulator.h"

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

}  // namespace tctl
