// Learning-rate schedules: the base rate as a function of the optimizer's iteration (steps completed
// before the current one), as Keras' LearningRateSchedule classes compute it.
//
// Config, under "optimizer.schedule":
//   {"type": "step", "step_size": N, "gamma": 0.1}                   base * gamma^floor(t / N)
//   {"type": "exponential", "decay_steps": N, "decay_rate": r, "staircase": false}
//                                                                    base * r^(t / N)  (staircase: floor(t / N))
//   {"type": "cosine", "decay_steps": N, "alpha": 0.0, "warmup_steps": W}
//       t < W: base * t / W (linear warm-up from 0); then with s = min(t - W, N):
//       base * ((1 - alpha) * (1 + cos(pi * s / N)) / 2 + alpha), reaching alpha * base after W + N steps.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "models/io/spec_reader.h"

namespace tctl {

struct ScheduleConfig {
  std::string type = "constant";  // "constant" when the config has no schedule
  std::int64_t step_size = 1;     // step
  double gamma = 0.1;             // step
  std::int64_t decay_steps = 1;   // exponential, cosine
  double decay_rate = 0.96;       // exponential
  bool staircase = false;         // exponential
  double alpha = 0.0;             // cosine
  std::int64_t warmup_steps = 0;  // cosine

  // Reads a "schedule" object; throws SpecError with the JSON path of a bad or unknown key.
  static ScheduleConfig parse(SpecReader& spec);
  nlohmann::json to_json() const;
  bool constant() const { return type == "constant"; }

  // The rate at `iteration` (>= 0) for base rate `base`. Pure; thread-safe.
  double rate(double base, std::int64_t iteration) const;
};

}  // namespace tctl
