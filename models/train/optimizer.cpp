#include "models/train/optimizer.h"

#include <algorithm>
#include <limits>

#include "core/ceil_div.h"

namespace tctl {

Optimizer::Optimizer(OptimizerConfig config) : config_(std::move(config)) {
  iterations_ = std::make_shared<Variable>("optimizer/iterations", Tensor::scalar(0.0f), config_.locking, false);
  lr_factor_ =
      std::make_shared<Variable>("optimizer/learning_rate_factor", Tensor::scalar(1.0f), LockingMode::kMutex, false);
  learning_rate_ = std::make_shared<Variable>("optimizer/learning_rate",
                                              Tensor::scalar(static_cast<float>(scheduled_learning_rate(0))),
                                              LockingMode::kMutex, false);
  if (config_.loss_scale.dynamic) {
    // Always on the host: the decision to skip is taken there (LossScaleFactor), whatever device trains.
    const auto scalar = [&](const char* name, double value) {
      return std::make_shared<Variable>(name, Tensor::scalar(static_cast<float>(value)), LockingMode::kMutex, false);
    };
    loss_scale_ = scalar("optimizer/loss_scale", config_.loss_scale.initial_scale);
    good_steps_ = scalar("optimizer/loss_scale_good_steps", 0.0);
    skipped_steps_ = scalar("optimizer/skipped_steps", 0.0);
  }
  if (config_.gradient_accumulation_steps > 1) {
    accumulation_share_ =
        std::make_shared<Variable>("optimizer/accumulation_share", Tensor::scalar(1.0f), LockingMode::kMutex, false);
    accumulation_keep_ =
        std::make_shared<Variable>("optimizer/accumulation_keep", Tensor::scalar(0.0f), LockingMode::kMutex, false);
  }
}

AccumulationStep accumulation_step(std::int64_t epoch, std::int64_t i, std::int64_t rows, std::int64_t batch,
                                   std::int64_t steps) {
  const std::int64_t epoch_steps = ceil_div(rows, batch);
  const std::int64_t group = i / steps;
  const std::int64_t group_rows = std::min(steps * batch, rows - group * steps * batch);
  const std::int64_t step_rows = std::min(batch, rows - i * batch);
  AccumulationStep a;
  a.update = (epoch - 1) * ceil_div(epoch_steps, steps) + group;
  a.share = static_cast<float>(static_cast<double>(step_rows) / static_cast<double>(group_rows));
  a.first = i % steps == 0;
  a.apply = i % steps == steps - 1 || i == epoch_steps - 1;
  return a;
}

double Optimizer::scheduled_learning_rate(std::int64_t iteration) const {
  return config_.schedule.rate(config_.learning_rate, iteration) * lr_factor();
}

// Writes in place through Variable::Update: once the last step's reads are released the buffer is not
// shared, so nothing is allocated.
void Optimizer::write_scalar(Variable& v, float value) {
  Variable::Update u(v);
  u.apply(0, [value](float) { return value; });
}

void Optimizer::begin_step(std::int64_t step, const AccumulationStep& a) {
  const float rate = static_cast<float>(scheduled_learning_rate(a.update >= 0 ? a.update : step));
  if (learning_rate_->read().item() != rate) write_scalar(*learning_rate_, rate);
  if (!accumulation_share_) return;
  if (accumulation_share_->read().item() != a.share) write_scalar(*accumulation_share_, a.share);
  const float keep = a.first ? 0.0f : 1.0f;
  if (accumulation_keep_->read().item() != keep) write_scalar(*accumulation_keep_, keep);
}

double Optimizer::lr_factor() const { return static_cast<double>(lr_factor_->read().item()); }

void Optimizer::set_lr_factor(double factor) {
  TCTL_CHECK(factor > 0.0 && factor < std::numeric_limits<double>::infinity(), "learning-rate factor must be positive");
  write_scalar(*lr_factor_, static_cast<float>(factor));
}

double Optimizer::learning_rate() const { return static_cast<double>(learning_rate_->read().item()); }

std::shared_ptr<Variable> Optimizer::slot(const Variable& var, const std::string& name, float initial) {
  const std::string full = "optimizer/" + var.name() + "/" + name;
  if (auto it = slot_by_name_.find(full); it != slot_by_name_.end()) return it->second;
  auto s = std::make_shared<Variable>(full, Tensor::filled(var.shape(), initial), var.locking_mode(), false);
  slots_.push_back(s);
  slot_by_name_.emplace(full, s);
  return s;
}

UpdateOps Optimizer::apply(Graph& g, const std::vector<std::shared_ptr<Variable>>& vars,
                           const std::vector<Output>& step_grads) {
  Graph::Scope scope(g, "optimizer", "cpu", Phase::kUpdate);
  const OptimizerConfig& c = config_;
  const bool adam = c.type == "adam" || c.type == "adamw";
  UpdateOps ops;
  std::vector<Output>& updates = ops.apply;
  std::vector<Output> unscaled = step_grads;
  const Output gate = loss_scale_ && !vars.empty() ? unscale(g, unscaled, ops) : Output{};
  const std::vector<Output> grads = accumulate(g, vars, unscaled, ops);
  // Only Adam and the moving averages read the step counter. An unused read would still run (automatic control
  // dependencies order it before the increment) and its frame would hold a snapshot of the counter, so every increment
  // would copy the variable: one buffer allocated per step. The learning rate has no writer in the graph, so its read
  // shares the buffer and costs nothing.
  const Output step = adam || c.use_ema ? g.read(iterations_) : Output{};
  const Output lr = g.read(learning_rate_);
  std::vector<Output> clipped = grads;
  if (c.global_clipnorm > 0.0 && !grads.empty()) {
    const Output norm = g.add("GlobalNorm", grads);
    for (Output& grad : clipped) grad = g.add("ClipByGlobalNorm", {grad, norm}, Attrs{{"clipnorm", c.global_clipnorm}});
  }
  for (std::size_t i = 0; i < vars.size(); ++i) {
    const auto& v = vars[i];
    const Output grad = clipped[i];
    if (c.type == "sgd" && c.momentum == 0.0) {
      updates.push_back(g.add("ApplySgd", {grad, lr}, {}, {{v, true}}));
    } else if (c.type == "sgd") {
      Attrs a{{"momentum", c.momentum}, {"nesterov", std::int64_t{c.nesterov}}};
      updates.push_back(g.add("ApplyMomentum", {grad, lr}, a, {{v, true}, {slot(*v, "velocity"), true}}));
    } else if (adam) {
      Attrs a{{"beta1", c.beta1},
              {"beta2", c.beta2},
              {"epsilon", c.epsilon},
              {"weight_decay", c.type == "adamw" ? c.weight_decay : 0.0}};
      updates.push_back(
          g.add("ApplyAdam", {grad, lr, step}, a, {{v, true}, {slot(*v, "m"), true}, {slot(*v, "v"), true}}));
    } else if (c.type == "rmsprop") {
      Attrs a{{"rho", c.rho}, {"momentum", c.momentum}, {"epsilon", c.epsilon}, {"centered", std::int64_t{c.centered}}};
      // Room for all four first: growing a vector built from an initializer list trips g++ 12's -Warray-bounds
      // (a false positive, in shared_ptr's move inside the reallocation).
      std::vector<VarUse> uses;
      uses.reserve(4);
      uses.push_back({v, true});
      uses.push_back({slot(*v, "velocity"), true});
      if (c.centered) uses.push_back({slot(*v, "average_gradient"), true});
      if (c.momentum > 0.0) uses.push_back({slot(*v, "momentum"), true});
      updates.push_back(g.add("ApplyRmsProp", {grad, lr}, a, std::move(uses)));
    } else {
      const float init = static_cast<float>(c.initial_accumulator_value);
      updates.push_back(g.add("ApplyAdagrad", {grad, lr}, Attrs{{"epsilon", c.epsilon}},
                              {{v, true}, {slot(*v, "accumulator", init), true}}));
    }
  }
  if (c.use_ema) average(g, vars, step, gate, updates);
  std::vector<Output> count_gate;
  if (gate.valid()) count_gate.push_back(gate);
  updates.push_back(g.add("Increment", std::move(count_gate), Attrs{{"amount", 1.0}}, {{iterations_, true}}));
  return ops;
}

// The scale is read once for the loss and for its reciprocal: threads sharing the model (hogwild) may
// change it between two reads, which would apply gradients at twice or half their size.
Output Optimizer::scale_loss(Graph& g, Output loss) {
  if (!loss_scale_) return loss;
  {
    Graph::Scope host(g, "loss", "cpu", Phase::kForward);
    scale_read_[&g] = g.read(loss_scale_);
  }
  Graph::Scope there(g, "loss", g.node(loss).device, Phase::kForward);
  return g.add("MulScalar", {loss, scale_read_[&g]});
}

// AllFinite and each MulScalar run where their gradients were made, so no gradient is copied to be checked
// (a model split over cpu and cuda: one AllFinite on each, their verdicts, 1 or 0, multiplied on the host);
// the decision and the scale's update on the host, next to the scale.
Output Optimizer::unscale(Graph& g, std::vector<Output>& grads, UpdateOps& ops) {
  std::vector<std::pair<std::string, std::vector<Output>>> by_device;
  for (const Output& grad : grads) {
    const std::string& device = g.node(grad).device;
    const auto it = std::find_if(by_device.begin(), by_device.end(), [&](const auto& d) { return d.first == device; });
    if (it == by_device.end())
      by_device.push_back({device, {grad}});
    else
      it->second.push_back(grad);
  }
  Output finite;
  for (const auto& [device, group] : by_device) {
    Output verdict;
    {
      Graph::Scope there(g, "optimizer", device, Phase::kUpdate);
      verdict = g.add("AllFinite", group);
    }
    finite = finite.valid() ? g.add("Mul", {finite, verdict}) : verdict;
  }
  const auto read = scale_read_.find(&g);
  TCTL_CHECK(read != scale_read_.end(), "gradients with loss scaling come from scale_loss's loss in the same graph");
  const Output factor = g.add("LossScaleFactor", {finite, read->second});
  scale_read_.erase(read);
  const Output update = g.add("UpdateLossScale", {finite}, Attrs{{"growth_steps", config_.loss_scale.growth_steps}},
                              {{loss_scale_, true}, {good_steps_, true}, {skipped_steps_, true}});
  ops.apply.push_back(update);
  if (accumulation_share_) ops.accumulate.push_back(update);
  for (Output& grad : grads) {
    Graph::Scope there(g, "optimizer", g.node(grad).device, Phase::kUpdate);
    grad = g.add("MulScalar", {grad, factor});
  }
  return factor;
}

// A scalar variable's value wherever it lives (a device's is copied to the host), or 0 for none.
double Optimizer::host_value(const std::shared_ptr<Variable>& v) {
  return v ? static_cast<double>(v->read().to(cpu_device()).item()) : 0.0;
}

double Optimizer::loss_scale() const { return host_value(loss_scale_); }

double Optimizer::skipped_steps() const { return host_value(skipped_steps_); }

// Gradient accumulation: each step's gradient goes into its sum, and the updates read the sums, after (a
// control edge: the order holds even without automatic control dependencies). A step that only accumulates
// runs ops.accumulate, which prunes the reads and everything after them. Without: the gradients as given.
std::vector<Output> Optimizer::accumulate(Graph& g, const std::vector<std::shared_ptr<Variable>>& vars,
                                          const std::vector<Output>& step_grads, UpdateOps& ops) {
  if (!accumulation_share_) return step_grads;
  std::vector<Output> sums(vars.size());
  const Output share = g.read(accumulation_share_);
  const Output keep = g.read(accumulation_keep_);
  for (std::size_t i = 0; i < vars.size(); ++i) {
    const auto sum = slot(*vars[i], "accumulated_gradient");
    const Output add = g.add("AccumulateGradient", {step_grads[i], share, keep}, {}, {{sum, true}});
    ops.accumulate.push_back(add);
    sums[i] = g.read(sum);
    g.add_control_input(sums[i].node, add.node);
  }
  ops.apply = ops.accumulate;
  return sums;
}

// use_ema: each weight's average follows its update, the last vars.size() of `updates` (Keras' use_ema:
// after the update, before the counter moves, which starts the average at the first update's weight).
void Optimizer::average(Graph& g, const std::vector<std::shared_ptr<Variable>>& vars, Output step, Output gate,
                        std::vector<Output>& updates) {
  const std::size_t first_update = updates.size() - vars.size();
  for (std::size_t i = 0; i < vars.size(); ++i) {
    const auto average = slot(*vars[i], "average");
    if (std::none_of(averages_.begin(), averages_.end(), [&](const auto& p) { return p.second == average; }))
      averages_.emplace_back(vars[i], average);
    const Output value = g.read(vars[i]);
    g.add_control_input(value.node, updates[first_update + i].node);
    std::vector<Output> inputs{value, step};
    if (gate.valid()) inputs.push_back(gate);
    updates.push_back(
        g.add("MovingAverage", std::move(inputs), Attrs{{"momentum", config_.ema_momentum}}, {{average, true}}));
  }
}

double Optimizer::iterations() const { return host_value(iterations_); }

std::vector<std::shared_ptr<Variable>> Optimizer::state() const {
  std::vector<std::shared_ptr<Variable>> out = slots_;
  if (loss_scale_) out.insert(out.end(), {loss_scale_, good_steps_, skipped_steps_});
  out.push_back(learning_rate_);
  out.push_back(lr_factor_);
  out.push_back(iterations_);
  return out;
}

}  // namespace tctl
