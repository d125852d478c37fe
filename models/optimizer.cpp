#include "models/optimizer.h"

#include <limits>

namespace tctl {

OptimizerConfig OptimizerConfig::parse(SpecReader& spec) {
  OptimizerConfig c;
  c.type = spec.one_of("type", {"sgd", "adam"}, "adam");
  const double inf = std::numeric_limits<double>::infinity();
  c.learning_rate = spec.number_in("learning_rate", c.type == "sgd" ? 0.01 : 0.001, 1e-12, inf);
  if (c.type == "sgd") {
    c.momentum = spec.number_in("momentum", 0.0, 0.0, 1.0);
    c.nesterov = spec.boolean("nesterov", false);
  } else {
    c.beta1 = spec.number_in("beta1", 0.9, 0.0, 1.0);
    c.beta2 = spec.number_in("beta2", 0.999, 0.0, 1.0);
    c.epsilon = spec.number_in("epsilon", 1e-7, 1e-30, inf);
  }
  std::vector<std::string> modes;
  for (auto m : locking_mode_names()) modes.emplace_back(m);
  c.locking = *parse_locking_mode(spec.one_of("locking", modes, "mutex"));
  spec.finish();
  return c;
}

nlohmann::json OptimizerConfig::to_json() const {
  const std::string mode(locking_mode_name(locking));
  if (type == "sgd")
    return {{"type", type}, {"learning_rate", learning_rate}, {"momentum", momentum}, {"nesterov", nesterov}, {"locking", mode}};
  return {{"type", type}, {"learning_rate", learning_rate}, {"beta1", beta1}, {"beta2", beta2}, {"epsilon", epsilon}, {"locking", mode}};
}

std::shared_ptr<Variable> Optimizer::slot(const Variable& var, const std::string& name) {
  const std::string full = "optimizer/" + var.name() + "/" + name;
  for (const auto& s : slots_)
    if (s->name() == full) return s;
  auto s = std::make_shared<Variable>(full, Tensor::zeros(DType::kF32, var.shape()), var.locking_mode(), false);
  slots_.push_back(s);
  return s;
}

std::vector<Output> Optimizer::apply(Graph& g, const std::vector<std::shared_ptr<Variable>>& vars,
                                     const std::vector<Output>& grads) {
  Graph::Scope scope(g, "optimizer", "cpu", Phase::kUpdate);
  if (!iterations_) iterations_ = std::make_shared<Variable>("optimizer/iterations", Tensor::scalar(0.0f), config_.locking, false);
  std::vector<Output> updates;
  // Only Adam reads the step counter. An unused read would still run (automatic control dependencies
  // order it before the increment) and its frame would hold a snapshot of the counter, so every
  // increment would copy the variable: one buffer allocated per step.
  const Output step = config_.type == "adam" ? g.read(iterations_) : Output{};
  const Attrs lr{{"learning_rate", config_.learning_rate}};
  for (std::size_t i = 0; i < vars.size(); ++i) {
    const auto& v = vars[i];
    if (config_.type == "sgd" && config_.momentum == 0.0) {
      updates.push_back(g.add("ApplySgd", {grads[i]}, lr, {{v, true}}));
    } else if (config_.type == "sgd") {
      Attrs a = lr;
      a.set("momentum", config_.momentum).set("nesterov", std::int64_t{config_.nesterov});
      updates.push_back(g.add("ApplyMomentum", {grads[i]}, a, {{v, true}, {slot(*v, "velocity"), true}}));
    } else {
      Attrs a = lr;
      a.set("beta1", config_.beta1).set("beta2", config_.beta2).set("epsilon", config_.epsilon);
      updates.push_back(g.add("ApplyAdam", {grads[i], step}, a, {{v, true}, {slot(*v, "m"), true}, {slot(*v, "v"), true}}));
    }
  }
  updates.push_back(g.add("Increment", {}, Attrs{{"amount", 1.0}}, {{iterations_, true}}));
  return updates;
}

std::vector<std::shared_ptr<Variable>> Optimizer::state() const {
  std::vector<std::shared_ptr<Variable>> out = slots_;
  if (iterations_) out.push_back(iterations_);
  return out;
}

}  // namespace tctl
