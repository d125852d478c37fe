#include "models/record/schedule.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace tctl {

ScheduleConfig ScheduleConfig::parse(SpecReader& spec) {
  ScheduleConfig c;
  if (!spec.has("type")) spec.fail("type", "a schedule needs a \"type\" (known: step, exponential, cosine)");
  c.type = spec.one_of("type", {"step", "exponential", "cosine"}, "");
  const double inf = std::numeric_limits<double>::infinity();
  if (c.type == "step") {
    c.step_size = spec.positive_int("step_size");
    c.gamma = spec.number_in("gamma", 0.1, 1e-12, inf);
  } else if (c.type == "exponential") {
    c.decay_steps = spec.positive_int("decay_steps");
    c.decay_rate = spec.number_in("decay_rate", 0.96, 1e-12, inf);
    c.staircase = spec.boolean("staircase", false);
  } else {
    c.decay_steps = spec.positive_int("decay_steps");
    c.alpha = spec.number_in("alpha", 0.0, 0.0, 1.0, true);
    c.warmup_steps = spec.non_negative_int("warmup_steps", 0);
  }
  spec.finish();
  return c;
}

nlohmann::json ScheduleConfig::to_json() const {
  if (type == "step") return {{"type", type}, {"step_size", step_size}, {"gamma", gamma}};
  if (type == "exponential")
    return {{"type", type}, {"decay_steps", decay_steps}, {"decay_rate", decay_rate}, {"staircase", staircase}};
  if (type == "cosine")
    return {{"type", type}, {"decay_steps", decay_steps}, {"alpha", alpha}, {"warmup_steps", warmup_steps}};
  return nullptr;
}

double ScheduleConfig::rate(double base, std::int64_t iteration) const {
  const std::int64_t t = std::max<std::int64_t>(iteration, 0);
  if (type == "step") return base * std::pow(gamma, static_cast<double>(t / step_size));
  if (type == "exponential") {
    const double p = static_cast<double>(t) / static_cast<double>(decay_steps);
    return base * std::pow(decay_rate, staircase ? std::floor(p) : p);
  }
  if (type == "cosine") {
    if (t < warmup_steps) return base * static_cast<double>(t) / static_cast<double>(warmup_steps);
    const double s = static_cast<double>(std::min(t - warmup_steps, decay_steps)) / static_cast<double>(decay_steps);
    return base * ((1.0 - alpha) * 0.5 * (1.0 + std::cos(std::numbers::pi * s)) + alpha);
  }
  return base;
}

}  // namespace tctl
