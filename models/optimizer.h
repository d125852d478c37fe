// Optimizers: parse their config and add the update ops of one training step to a graph.
//
// Config: {"type": "sgd", "learning_rate": 0.01, "momentum": 0.9, "nesterov": false} or
//         {"type": "adam", "learning_rate": 0.001, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-7}.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/graph.h"
#include "models/spec_reader.h"

namespace tctl {

struct OptimizerConfig {
  std::string type = "adam";
  double learning_rate = 0.001;
  double momentum = 0.0;
  bool nesterov = false;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-7;
  // How updates meet when several threads train one model (core/locking_mode.h); the model's variables,
  // the slots and the step counter all use it.
  LockingMode locking = LockingMode::kMutex;

  static OptimizerConfig parse(SpecReader& spec);
  nlohmann::json to_json() const;
};

// Owns the optimizer's state: slot variables (momentum, Adam moments) and the step counter.
class Optimizer {
 public:
  explicit Optimizer(OptimizerConfig config) : config_(std::move(config)) {}

  // Adds one update per variable, given its gradient, plus the step counter's increment; returns the
  // ops to run as targets. Slots are created the first time a variable is seen and reused after, so an
  // eager step, which traces the updates again every step, keeps its moments.
  std::vector<Output> apply(Graph& g, const std::vector<std::shared_ptr<Variable>>& vars,
                            const std::vector<Output>& grads);

  // Slots and step counter, for checkpoints.
  std::vector<std::shared_ptr<Variable>> state() const;
  const OptimizerConfig& config() const { return config_; }

 private:
  std::shared_ptr<Variable> slot(const Variable& var, const std::string& name);

  OptimizerConfig config_;
  std::shared_ptr<Variable> iterations_;
  std::vector<std::shared_ptr<Variable>> slots_;
};

}  // namespace tctl
