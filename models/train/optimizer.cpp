#include "models/train/optimizer.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

#include "core/ceil_div.h"
#include "core/device.h"
#include "core/op_registry.h"

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

// One variable's update op, as the config's optimizer makes it: the op, its attributes, its scalar inputs
// after the gradient (the learning rate; Adam's steps done) and its variables (the weight, then its slots).
Optimizer::VariableUpdate Optimizer::update_of(const std::shared_ptr<Variable>& v, Output lr, Output step) {
  const OptimizerConfig& c = config_;
  if (c.type == "sgd" && c.momentum == 0.0) return {"ApplySgd", {}, {lr}, {{v, true}}};
  if (c.type == "sgd") {
    return {"ApplyMomentum",
            Attrs{{"momentum", c.momentum}, {"nesterov", std::int64_t{c.nesterov}}},
            {lr},
            {{v, true}, {slot(*v, "velocity"), true}}};
  }
  if (c.type == "adam" || c.type == "adamw") {
    Attrs a{{"beta1", c.beta1},
            {"beta2", c.beta2},
            {"epsilon", c.epsilon},
            {"weight_decay", c.type == "adamw" ? c.weight_decay : 0.0}};
    return {"ApplyAdam", std::move(a), {lr, step}, {{v, true}, {slot(*v, "m"), true}, {slot(*v, "v"), true}}};
  }
  if (c.type == "rmsprop") {
    Attrs a{{"rho", c.rho}, {"momentum", c.momentum}, {"epsilon", c.epsilon}, {"centered", std::int64_t{c.centered}}};
    // Room for all four first: growing a vector built from an initializer list trips g++ 12's -Warray-bounds
    // (a false positive, in shared_ptr's move inside the reallocation).
    std::vector<VarUse> uses;
    uses.reserve(4);
    uses.push_back({v, true});
    uses.push_back({slot(*v, "velocity"), true});
    if (c.centered) uses.push_back({slot(*v, "average_gradient"), true});
    if (c.momentum > 0.0) uses.push_back({slot(*v, "momentum"), true});
    return {"ApplyRmsProp", std::move(a), {lr}, std::move(uses)};
  }
  const float init = static_cast<float>(c.initial_accumulator_value);
  return {"ApplyAdagrad", Attrs{{"epsilon", c.epsilon}}, {lr}, {{v, true}, {slot(*v, "accumulator", init), true}}};
}

namespace {

// The variables by the device placement will run their updates on: that of the first node using each (the
// root of its colocation group, core/placement.cpp), in the order of `vars`; "cpu" for one nothing uses.
std::vector<std::pair<std::string, std::vector<std::size_t>>> fusable_groups(
    const Graph& g, const std::vector<std::shared_ptr<Variable>>& vars) {
  std::unordered_map<const Variable*, std::string> first_device;
  for (const Node& n : g.nodes())
    for (const VarUse& use : n.vars) first_device.emplace(use.var.get(), n.device);
  std::vector<std::pair<std::string, std::vector<std::size_t>>> groups;
  for (std::size_t i = 0; i < vars.size(); ++i) {
    const auto it = first_device.find(vars[i].get());
    const std::string device = it == first_device.end() ? "cpu" : it->second;
    auto group = std::find_if(groups.begin(), groups.end(), [&](const auto& e) { return e.first == device; });
    if (group == groups.end()) group = groups.insert(groups.end(), {device, {}});
    group->second.push_back(i);
  }
  return groups;
}

// Whether `device` (a name) is present and not the CPU, and runs FusedUpdate (Device::supports): there one
// kernel updates all its variables. The CPU keeps an update per variable, each free to run once its gradient
// is ready.
bool fuses_updates(const std::string& device) {
  if (is_cpu_name(device)) return false;
  const Device* d = DeviceRegistry::instance().find(device);
  if (d == nullptr) return false;
  Node probe;
  probe.op = &op_def("FusedUpdate");
  return d->supports(probe);
}

}  // namespace

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
  std::vector<Output> applied(vars.size());
  std::vector<VariableUpdate> each;
  for (const auto& v : vars) each.push_back(update_of(v, lr, step));
  for (const auto& [device, members] : fusable_groups(g, vars)) {
    // One FusedUpdate for the device's variables, where it has the kernel (one launch on a GPU for what
    // were as many as variables); the rest one update each, as on the CPU, where each may run as soon as
    // its gradient is ready.
    if (members.size() > 1 && fuses_updates(device)) {
      Graph::Scope there(g, "optimizer", device, Phase::kUpdate);
      const VariableUpdate& first = each[members[0]];
      std::vector<Output> inputs;
      std::vector<VarUse> uses;
      for (const std::size_t i : members) {
        inputs.push_back(clipped[i]);
        uses.insert(uses.end(), each[i].uses.begin(), each[i].uses.end());
      }
      inputs.insert(inputs.end(), first.scalars.begin(), first.scalars.end());
      Attrs a = first.attrs;
      a.set("update", first.op);
      a.set("variables", static_cast<std::int64_t>(members.size()));
      const Output fused = g.add("FusedUpdate", std::move(inputs), std::move(a), std::move(uses));
      updates.push_back(fused);
      for (const std::size_t i : members) applied[i] = fused;
      continue;
    }
    for (const std::size_t i : members) {
      VariableUpdate& u = each[i];
      std::vector<Output> inputs{clipped[i]};
      inputs.insert(inputs.end(), u.scalars.begin(), u.scalars.end());
      applied[i] = g.add(u.op, std::move(inputs), u.attrs, std::move(u.uses));
      updates.push_back(applied[i]);
    }
  }
  if (c.use_ema) average(g, vars, step, gate, applied, updates);
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
                        const std::vector<Output>& applied, std::vector<Output>& updates) {
  for (std::size_t i = 0; i < vars.size(); ++i) {
    const auto average = slot(*vars[i], "average");
    if (std::none_of(averages_.begin(), averages_.end(), [&](const auto& p) { return p.second == average; }))
      averages_.emplace_back(vars[i], average);
    const Output value = g.read(vars[i]);
    g.add_control_input(value.node, applied[i].node);
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
