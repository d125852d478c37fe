// Optimizers: parse their config and add the update ops of one training step to a graph.
//
// Config (Keras names and defaults; the keys of another type are unknown keys):
//   {"type": "sgd", "learning_rate": 0.01, "momentum": 0.0, "nesterov": false}
//   {"type": "adam", "learning_rate": 0.001, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-7}
//   {"type": "adamw", ... adam's keys ..., "weight_decay": 0.004}      decoupled: w -= lr * wd * w, then Adam
//   {"type": "rmsprop", "learning_rate": 0.001, "rho": 0.9, "momentum": 0.0, "epsilon": 1e-7, "centered": false}
//   {"type": "adagrad", "learning_rate": 0.001, "initial_accumulator_value": 0.1, "epsilon": 1e-7}
// Every type also takes "locking" (core/locking_mode.h), "global_clipnorm" (clip all gradients together
// to this global norm) and "schedule" (models/train/schedule.h). Keras' per-variable "clipnorm" and "clipvalue"
// are refused with a message pointing to global_clipnorm.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/graph.h"
#include "models/io/spec_reader.h"
#include "models/train/schedule.h"

namespace tctl {

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
  // How updates meet when several threads train one model (core/locking_mode.h); the model's variables,
  // the slots and the step counter all use it.
  LockingMode locking = LockingMode::kMutex;

  // Reads the "optimizer" object; throws SpecError naming the JSON path of a bad or unknown key.
  static OptimizerConfig parse(SpecReader& spec);
  nlohmann::json to_json() const;
  // How many slot tensors the optimizer keeps per weight (Adam's two moments, a momentum, an accumulator).
  int slots_per_weight() const;
};

// Owns the optimizer's state: slot variables (momentum, moments, accumulators), the step counter, and the
// learning rate as a scalar variable that every update op reads, so a schedule or a callback can change
// it between steps without retracing the graph.
//
// Threads: apply() is called by the thread building a graph; begin_step() and set_lr_factor() by the
// training thread between steps (or a callback on it). The two learning-rate variables are always in
// mutex mode, whatever `locking` says: the graph only reads them, and a locked read shares the buffer
// instead of copying it, so steady-state steps allocate nothing.
class Optimizer {
 public:
  explicit Optimizer(OptimizerConfig config);

  // Adds one update per variable, given its gradient (with global_clipnorm, first the global norm and the
  // scaled gradients), plus the step counter's increment; returns the ops to run as targets. Slots are
  // created the first time a variable is seen and reused after, so an eager step, which traces the
  // updates again every step, keeps its moments. Update kernels throw NonFiniteError, before writing
  // anything, when a gradient holds NaN or infinity.
  std::vector<Output> apply(Graph& g, const std::vector<std::shared_ptr<Variable>>& vars,
                            const std::vector<Output>& grads);

  // The rate for the step at `iteration` (steps completed before it): schedule(iteration) × lr_factor().
  double scheduled_learning_rate(std::int64_t iteration) const;
  // Sets the learning-rate variable to scheduled_learning_rate(iteration) when that changes its value
  // (an in-place write: nothing is allocated). The training loop calls it before every step.
  void begin_step(std::int64_t iteration);
  // A multiplier on the schedule (reduce-on-plateau lowers it); 1 at first. Must be positive and finite.
  // Held in the variable "optimizer/learning_rate_factor" (float32), so checkpoints of state() keep it.
  // The new factor takes effect at the next begin_step.
  double lr_factor() const;
  void set_lr_factor(double factor);
  // The rate the next step's updates read (the variable's current value).
  double learning_rate() const;

  // Slots, then "optimizer/learning_rate", "optimizer/learning_rate_factor" and, last, "optimizer/iterations":
  // everything a checkpoint must save to resume. The learning-rate variable is recomputed by begin_step
  // from the schedule, the iteration and the factor, so restoring the factor is what matters.
  std::vector<std::shared_ptr<Variable>> state() const;
  const OptimizerConfig& config() const { return config_; }

 private:
  std::shared_ptr<Variable> slot(const Variable& var, const std::string& name, float initial = 0.0f);
  static void write_scalar(Variable& v, float value);

  OptimizerConfig config_;
  std::shared_ptr<Variable> iterations_;
  std::shared_ptr<Variable> learning_rate_;
  std::shared_ptr<Variable> lr_factor_;
  std::vector<std::shared_ptr<Variable>> slots_;
  std::unordered_map<std::string, std::shared_ptr<Variable>> slot_by_name_;  // slots_, found by name
};

}  // namespace tctl
