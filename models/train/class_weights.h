// Keras' class_weight (the train config's "class_weight"): each class's weight in the training loss,
// resolved against the run's data once it is read.
#pragma once

#include <cstdint>
#include <vector>

#include "models/data/dataset.h"
#include "models/record/train_config.h"

namespace tctl {

// The weights of the `count` classes (class_weight_count, models/train/model.h) that c.class_weight asks for:
//   "balanced"            class k weighs rows / (count * rows of class k) over the training rows, so every
//                         class adds as much to the loss (scikit-learn's "balanced"); a class without rows, 1
//   {"1": 5, "cat": 2}    the classes named, by index or by the data's label names, weigh as given; others 1
// Throws SpecError naming c.file and the key for a class the data lacks, and for "balanced" on a streamed
// run (whose rows are not held to count).
std::vector<float> resolve_class_weights(const TrainConfig& c, const Dataset& train, std::int64_t count);

}  // namespace tctl
