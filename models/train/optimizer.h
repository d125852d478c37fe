// Optimizers: the update ops of one training step added to a graph, and the state they keep (slots, the
// step counter, the learning rate). Their config is models/record/optimizer_config.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/graph.h"
#include "models/io/spec_reader.h"
#include "models/record/optimizer_config.h"

namespace tctl {

// Where a training step stands in an update (OptimizerConfig::gradient_accumulation_steps): the update it
// adds to (the schedule's iteration; -1: the step's own number), its batch's share of that update's rows,
// whether it starts the update's sum, and whether it applies the update. Without accumulation every step is
// its own update: the defaults.
struct AccumulationStep {
  std::int64_t update = -1;
  float share = 1.0f;
  bool first = true;
  bool apply = true;
};

// The plan of step `i` (0-based, in its epoch) of epoch `epoch` (1-based) of `rows` rows in batches of
// `batch`, `steps` steps to an update: the epoch's steps in groups of `steps`, the last group smaller when
// they do not divide, each group's rows summed with weights that make its update the mean over all of them,
// as one batch of those rows would.
AccumulationStep accumulation_step(std::int64_t epoch, std::int64_t i, std::int64_t rows, std::int64_t batch,
                                   std::int64_t steps);

// The ops a training step's updates are: all of them (the gradients accumulated, when they are, then the
// updates) and, with gradient accumulation, those of a step that only accumulates.
struct UpdateOps {
  std::vector<Output> apply;
  std::vector<Output> accumulate;
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
  // With gradient_accumulation_steps above 1, each gradient is first summed into its slot
  // "accumulated_gradient" (AccumulateGradient, as begin_step's AccumulationStep says), and the updates read
  // the sums. With use_ema, each update is followed by its weight's moving average (slot "average").
  // With dynamic loss scaling (config().loss_scale), the gradients given are those of scale_loss's loss: they are
  // divided by the scale first, and when any holds a NaN or an infinity the step's updates, averages and step
  // count are skipped (dead, core/ops/loss_scale.cpp) and the scale halved, instead of NonFiniteError.
  UpdateOps apply(Graph& g, const std::vector<std::shared_ptr<Variable>>& vars, const std::vector<Output>& grads);
  // The loss whose gradients apply() takes: `loss` times the loss scale, or `loss` itself without scaling.
  // With scaling, apply() must follow in the same graph (it divides by the same read of the scale).
  Output scale_loss(Graph& g, Output loss);
  // Dynamic loss scaling's state: the scale the next step multiplies the loss by, and the steps skipped so
  // far (0 and 0 without scaling).
  double loss_scale() const;
  double skipped_steps() const;

  // The rate for the step at `iteration` (steps completed before it): schedule(iteration) × lr_factor().
  double scheduled_learning_rate(std::int64_t iteration) const;
  // Sets the learning-rate variable to scheduled_learning_rate(iteration) when that changes its value
  // (an in-place write: nothing is allocated), the iteration being `a.update`, or `step` when that is -1;
  // with gradient accumulation, also the step's share and whether it starts the sum. The training loop
  // calls it before every step.
  void begin_step(std::int64_t step, const AccumulationStep& a = {});
  // use_ema: each trainable variable with its moving average, in the order apply() met them.
  const std::vector<std::pair<std::shared_ptr<Variable>, std::shared_ptr<Variable>>>& averages() const {
    return averages_;
  }
  // A multiplier on the schedule (reduce-on-plateau lowers it); 1 at first. Must be positive and finite.
  // Held in the variable "optimizer/learning_rate_factor" (float32), so checkpoints of state() keep it.
  // The new factor takes effect at the next begin_step.
  double lr_factor() const;
  void set_lr_factor(double factor);
  // The rate the next step's updates read (the variable's current value).
  double learning_rate() const;
  // Steps applied so far: "optimizer/iterations", read wherever the variable lives.
  double iterations() const;

  // Slots, the loss scale's three variables when it has them, then "optimizer/learning_rate",
  // "optimizer/learning_rate_factor" and, last, "optimizer/iterations": everything a checkpoint must save to resume.
  // The learning-rate variable is recomputed by begin_step from the schedule, the iteration and the factor, so
  // restoring the factor is what matters.
  std::vector<std::shared_ptr<Variable>> state() const;
  const OptimizerConfig& config() const { return config_; }

 private:
  std::shared_ptr<Variable> slot(const Variable& var, const std::string& name, float initial = 0.0f);
  // apply()'s two optional stages: the gradients summed (returns what the updates read), the averages kept.
  std::vector<Output> accumulate(Graph& g, const std::vector<std::shared_ptr<Variable>>& vars,
                                 const std::vector<Output>& step_grads, UpdateOps& ops);
  // `applied`: each variable's update node (a FusedUpdate may serve several).
  void average(Graph& g, const std::vector<std::shared_ptr<Variable>>& vars, Output step, Output gate,
               const std::vector<Output>& applied, std::vector<Output>& updates);
  struct VariableUpdate {
    std::string op;
    Attrs attrs;
    std::vector<Output> scalars;
    std::vector<VarUse> uses;
  };
  VariableUpdate update_of(const std::shared_ptr<Variable>& v, Output lr, Output step);
  static void write_scalar(Variable& v, float value);
  static double host_value(const std::shared_ptr<Variable>& v);
  // Divides the gradients by the loss scale; returns the factor every skipped node reads (dead on overflow)
  // and adds the scale's update to `ops`.
  Output unscale(Graph& g, std::vector<Output>& grads, UpdateOps& ops);

  OptimizerConfig config_;
  std::shared_ptr<Variable> iterations_;
  std::shared_ptr<Variable> learning_rate_;
  std::shared_ptr<Variable> lr_factor_;
  // Gradient accumulation's step share and whether the step adds to the sum (1) or starts it (0).
  std::shared_ptr<Variable> accumulation_share_;
  std::shared_ptr<Variable> accumulation_keep_;
  // Dynamic loss scaling: the scale, the finite steps since it last changed, the steps skipped.
  std::shared_ptr<Variable> loss_scale_, good_steps_, skipped_steps_;
  // The read of the scale scale_loss made in each graph being traced, which apply() unscales by.
  std::unordered_map<const Graph*, Output> scale_read_;
  std::vector<std::pair<std::shared_ptr<Variable>, std::shared_ptr<Variable>>> averages_;
  std::vector<std::shared_ptr<Variable>> slots_;
  std::unordered_map<std::string, std::shared_ptr<Variable>> slot_by_name_;  // slots_, found by name
};

}  // namespace tctl
