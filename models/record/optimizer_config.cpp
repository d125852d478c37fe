#include "models/record/optimizer_config.h"

#include <limits>

namespace tctl {

OptimizerConfig OptimizerConfig::parse(SpecReader& spec) {
  OptimizerConfig c;
  c.type = spec.one_of("type", {"sgd", "adam", "adamw", "rmsprop", "adagrad"}, "adam");
  for (const std::string key : {"clipnorm", "clipvalue"})
    if (spec.has(key))
      spec.fail(key, key +
                         " (per-variable clipping) is not supported; use global_clipnorm, which scales all "
                         "gradients together when their global norm exceeds it");
  const double inf = std::numeric_limits<double>::infinity();
  c.learning_rate = spec.number_in("learning_rate", c.type == "sgd" ? 0.01 : 0.001, 1e-12, inf);
  if (c.type == "sgd") {
    c.momentum = spec.number_in("momentum", 0.0, 0.0, 1.0);
    c.nesterov = spec.boolean("nesterov", false);
  } else if (c.type == "adam" || c.type == "adamw") {
    c.beta1 = spec.number_in("beta1", 0.9, 0.0, 1.0);
    c.beta2 = spec.number_in("beta2", 0.999, 0.0, 1.0);
    c.epsilon = spec.number_in("epsilon", 1e-7, 1e-30, inf);
    if (c.type == "adamw") c.weight_decay = spec.number_in("weight_decay", 0.004, 0.0, inf);
  } else if (c.type == "rmsprop") {
    c.rho = spec.number_in("rho", 0.9, 0.0, 1.0);
    c.momentum = spec.number_in("momentum", 0.0, 0.0, 1.0);
    c.epsilon = spec.number_in("epsilon", 1e-7, 1e-30, inf);
    c.centered = spec.boolean("centered", false);
  } else {
    c.initial_accumulator_value = spec.number_in("initial_accumulator_value", 0.1, 0.0, inf);
    c.epsilon = spec.number_in("epsilon", 1e-7, 1e-30, inf);
  }
  if (spec.has("global_clipnorm")) c.global_clipnorm = spec.number_in("global_clipnorm", 0.0, 1e-12, inf);
  if (spec.has("schedule")) {
    SpecReader s = spec.object("schedule");
    c.schedule = ScheduleConfig::parse(s);
  }
  c.gradient_accumulation_steps = spec.positive_int("gradient_accumulation_steps", 1);
  c.use_ema = spec.boolean("use_ema", false);
  if (c.use_ema) c.ema_momentum = spec.number_in("ema_momentum", 0.99, 0.0, 0.999999);
  std::vector<std::string> modes;
  for (auto m : locking_mode_names()) modes.emplace_back(m);
  c.locking = *parse_locking_mode(spec.one_of("locking", modes, "mutex"));
  spec.finish();
  return c;
}

int OptimizerConfig::slots_per_weight() const {
  const int extra = (gradient_accumulation_steps > 1 ? 1 : 0) + (use_ema ? 1 : 0);
  if (type == "adam" || type == "adamw") return 2 + extra;
  if (type == "rmsprop") return 1 + (momentum > 0.0) + centered + extra;
  if (type == "adagrad") return 1 + extra;
  return (momentum > 0.0 ? 1 : 0) + extra;
}

nlohmann::json OptimizerConfig::to_json() const {
  nlohmann::json j{{"type", type}, {"learning_rate", learning_rate}};
  if (type == "sgd") {
    j["momentum"] = momentum;
    j["nesterov"] = nesterov;
  } else if (type == "adam" || type == "adamw") {
    j["beta1"] = beta1;
    j["beta2"] = beta2;
    j["epsilon"] = epsilon;
    if (type == "adamw") j["weight_decay"] = weight_decay;
  } else if (type == "rmsprop") {
    j["rho"] = rho;
    j["momentum"] = momentum;
    j["epsilon"] = epsilon;
    j["centered"] = centered;
  } else {
    j["initial_accumulator_value"] = initial_accumulator_value;
    j["epsilon"] = epsilon;
  }
  if (global_clipnorm > 0.0) j["global_clipnorm"] = global_clipnorm;
  if (!schedule.constant()) j["schedule"] = schedule.to_json();
  // Written only when set, so the configs recorded before these keys existed resume as they were.
  if (gradient_accumulation_steps > 1) j["gradient_accumulation_steps"] = gradient_accumulation_steps;
  if (use_ema) {
    j["use_ema"] = true;
    j["ema_momentum"] = ema_momentum;
  }
  j["locking"] = std::string(locking_mode_name(locking));
  return j;
}

}  // namespace tctl
