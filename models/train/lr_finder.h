// The learning-rate range test (Smith 2015; the LR finder of fastai and PyTorch Lightning): training steps
// at a learning rate raised exponentially from `start` to `end`, the loss after each smoothed, stopped once
// it diverges; the rate where the smoothed loss falls fastest is the suggestion.
#pragma once

#include <cstdint>
#include <vector>

#include "models/data/dataset.h"
#include "models/train/model.h"

namespace tctl {

struct LrFindOptions {
  double start = 1e-7;
  double end = 10.0;
  std::int64_t steps = 100;
  double smoothing = 0.98;  // the loss's exponential average keeps this much of itself each step
  double divergence = 4.0;  // stop once the smoothed loss exceeds this many times its lowest
};

struct LrFindPoint {
  double learning_rate = 0.0;
  double loss = 0.0;      // the step's batch loss
  double smoothed = 0.0;  // its bias-corrected exponential average
};

struct LrFindResult {
  std::vector<LrFindPoint> points;  // one per step taken
  std::int64_t suggested = -1;      // index in points of the suggestion; -1 when too few points
  std::int64_t lowest = -1;         // index of the lowest smoothed loss
  bool diverged = false;            // stopped before `steps`: the loss grew past `divergence` or went NaN
};

// Runs the test on a model made for it (its weights and optimizer state are spent): `steps` steps of
// `batch_size` rows drawn from `train` in a seeded shuffled order, epoch after epoch as needed. The model's
// optimizer must have a constant schedule and learning rate `start`: each step scales it by the factor
// that gives its rate.
LrFindResult find_learning_rate(Model& model, const Dataset& train, std::int64_t batch_size,
                                const LrFindOptions& options);

// The suggestion over `points`: where the smoothed loss falls fastest against the logarithm of the rate
// (its steepest negative slope by central differences), the first tenth of the points and the last left out
// (Lightning's skip_begin and skip_end); -1 with fewer than 5 points or no falling stretch.
std::int64_t steepest_descent(const std::vector<LrFindPoint>& points);

}  // namespace tctl
