#include "models/train/lr_finder.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/errors.h"

namespace tctl {

std::int64_t steepest_descent(const std::vector<LrFindPoint>& points) {
  const auto n = static_cast<std::int64_t>(points.size());
  if (n < 5) return -1;
  // The points in [begin, end) are read, each one's slope from its neighbours there.
  const std::int64_t begin = n / 10, end = n - 1;
  std::int64_t best = -1;
  double steepest = 0.0;
  for (std::int64_t i = begin + 1; i + 1 < end; ++i) {
    const LrFindPoint& a = points[static_cast<std::size_t>(i - 1)];
    const LrFindPoint& b = points[static_cast<std::size_t>(i + 1)];
    const double slope = (b.smoothed - a.smoothed) / (std::log(b.learning_rate) - std::log(a.learning_rate));
    if (std::isfinite(slope) && slope < steepest) {
      steepest = slope;
      best = i;
    }
  }
  return best;
}

LrFindResult find_learning_rate(Model& model, const Dataset& train, std::int64_t batch_size, const LrFindOptions& o) {
  TCTL_CHECK(o.steps >= 2 && o.start > 0.0 && o.end > o.start, "a range test needs two steps and start < end");
  TCTL_CHECK(train.size() > 0, "a range test needs training rows");
  LrFindResult result;
  std::vector<std::int64_t> order(static_cast<std::size_t>(train.size()));
  std::mt19937_64 rng(model.options().seed);
  std::size_t at = order.size();  // past the end: shuffle before the first batch
  Tensor x, y;
  double average = 0.0, lowest = 0.0;
  for (std::int64_t step = 0; step < o.steps; ++step) {
    if (at >= order.size()) {
      std::iota(order.begin(), order.end(), std::int64_t{0});
      std::shuffle(order.begin(), order.end(), rng);
      at = 0;
    }
    const std::size_t count = std::min(order.size() - at, static_cast<std::size_t>(batch_size));
    const std::span<const std::int64_t> rows(order.data() + at, count);
    at += count;
    const double rate =
        o.start * std::pow(o.end / o.start, static_cast<double>(step) / static_cast<double>(o.steps - 1));
    model.optimizer().set_lr_factor(rate / o.start);
    float loss = std::nanf("");
    try {
      loss = model.train_batch(gather_rows(train.x, rows, x), model.targets_into(train, rows, y), step)[0].item();
    } catch (const NonFiniteError&) {
      // A gradient gone infinite at this rate: as diverged as a loss can be.
    }
    if (!std::isfinite(loss)) {
      result.diverged = true;
      break;
    }
    average = o.smoothing * average + (1.0 - o.smoothing) * loss;
    const double smoothed = average / (1.0 - std::pow(o.smoothing, static_cast<double>(step + 1)));
    result.points.push_back({rate, loss, smoothed});
    if (result.lowest < 0 || smoothed < lowest) {
      lowest = smoothed;
      result.lowest = static_cast<std::int64_t>(result.points.size()) - 1;
    }
    if (step > 0 && smoothed > o.divergence * lowest) {
      result.diverged = true;
      break;
    }
  }
  result.suggested = steepest_descent(result.points);
  return result;
}

}  // namespace tctl
