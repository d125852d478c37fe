// An optimizer's config, the train config's "optimizer" object (the optimizers themselves: models/train/optimizer.h).
//
// Config (Keras names and defaults; the keys of another type are unknown keys):
//   {"type": "sgd", "learning_rate": 0.01, "momentum": 0.0, "nesterov": false}
//   {"type": "adam", "learning_rate": 0.001, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-7}
//   {"type": "adamw", ... adam's keys ..., "weight_decay": 0.004}      decoupled: w -= lr * wd * w, then Adam
//   {"type": "rmsprop", "learning_rate": 0.001, "rho": 0.9, "momentum": 0.0, "epsilon": 1e-7, "centered": false}
//   {"type": "adagrad", "learning_rate": 0.001, "initial_accumulator_value": 0.1, "epsilon": 1e-7}
// Every type also takes "locking" (core/locking_mode.h), "global_clipnorm" (clip all gradients together
// to this global norm), "schedule" (models/record/schedule.h), and as Keras' optimizers do,
// "gradient_accumulation_steps" (one update per that many batches, from their mean gradient: a batch that
// many times larger in the memory of one) and "use_ema" with "ema_momentum" (an exponential moving average
// of every trainable weight, kept beside it; the run validates, tests and saves the averages). Keras' per-variable
// "clipnorm" and "clipvalue" are refused with a message pointing to global_clipnorm.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/locking_mode.h"
#include "models/io/spec_reader.h"
#include "models/record/schedule.h"

namespace tctl {

// Dynamic loss scaling, which the mixed_float16 precision policy turns on (Keras' LossScaleOptimizer and its
// defaults): the loss times `initial_scale` at first, doubled after `growth_steps` finite steps in a row,
// halved (not below 1) at a step whose gradients overflowed, which is skipped (models/train/optimizer.h).
struct LossScaleConfig {
  bool dynamic = false;
  double initial_scale = 32768.0;
  std::int64_t growth_steps = 2000;
};

struct OptimizerConfig {
  std::string type = "adam";  // sgd, adam, adamw, rmsprop, adagrad
  double learning_rate = 0.001;
  double momentum = 0.0;                   // sgd, rmsprop
  bool nesterov = false;                   // sgd
  double beta1 = 0.9;                      // adam, adamw
  double beta2 = 0.999;                    // adam, adamw
  double epsilon = 1e-7;                   // adam, adamw, rmsprop, adagrad
  double weight_decay = 0.004;             // adamw
  double rho = 0.9;                        // rmsprop
  bool centered = false;                   // rmsprop
  double initial_accumulator_value = 0.1;  // adagrad
  double global_clipnorm = 0.0;            // 0: no clipping
  ScheduleConfig schedule;                 // constant unless "schedule" is given
  std::int64_t gradient_accumulation_steps = 1;
  bool use_ema = false;
  double ema_momentum = 0.99;
  // How updates meet when several threads train one model (core/locking_mode.h); the model's variables,
  // the slots and the step counter all use it.
  LockingMode locking = LockingMode::kMutex;
  // Set from the train config's "precision" and "loss_scale" (models/record/train_config.h), not read from
  // the "optimizer" object.
  LossScaleConfig loss_scale;

  // Reads the "optimizer" object; throws SpecError naming the JSON path of a bad or unknown key.
  static OptimizerConfig parse(SpecReader& spec);
  nlohmann::json to_json() const;
  // How many slot tensors the optimizer keeps per weight (Adam's two moments, a momentum, an accumulator).
  int slots_per_weight() const;
};

}  // namespace tctl
