#include "core/graph.h"

#include <algorithm>
#include <atomic>

#include "core/errors.h"

namespace tctl {

namespace {
std::atomic<std::uint32_t> g_next_graph_id{1};
thread_local Graph* t_default_graph = nullptr;
}  // namespace

Graph::Graph() : id_(g_next_graph_id.fetch_add(1, std::memory_order_relaxed)) {}

Graph::DefaultScope::DefaultScope(Graph* g) : previous_(t_default_graph) { t_default_graph = g; }
Graph::DefaultScope::~DefaultScope() { t_default_graph = previous_; }

Graph& default_graph() {
  if (t_default_graph != nullptr) return *t_default_graph;
  thread_local Graph own;
  return own;
}

Node& Graph::append(const OpDef& op) {
  Node n;
  n.id = size();
  n.op = &op;
  n.layer = layer_;
  n.device = device_;
  n.phase = phase_;
  std::string base = layer_.empty() ? op.name : layer_ + "/" + op.name;
  int& count = name_counts_[base];
  n.name = count == 0 ? base : base + "_" + std::to_string(count);
  ++count;
  nodes_.push_back(std::move(n));
  return nodes_.back();
}

Output Graph::add(std::string_view op, std::vector<Output> inputs, Attrs attrs, std::vector<VarUse> vars) {
  return notify(add_node(op, std::move(inputs), std::move(attrs), std::move(vars)));
}

Output Graph::add_node(std::string_view op_name, std::vector<Output> inputs, Attrs attrs, std::vector<VarUse> vars) {
  const OpDef& op = op_def(op_name);
  TCTL_CHECK(op.num_inputs < 0 || op.num_inputs == static_cast<int>(inputs.size()),
             std::string(op_name) + " called with a wrong number of inputs");
  std::vector<TensorSpec> specs;
  specs.reserve(inputs.size());
  for (Output in : inputs) {
    if (in.graph != 0 && in.graph != id_)
      throw GraphError("an input of " + std::string(op_name) + " comes from graph #" + std::to_string(in.graph) +
                       ", not from this graph #" + std::to_string(id_) +
                       "; a thread that continues another thread's model must install its graph with as_default()");
    TCTL_CHECK(in.valid() && in.node < size(), "input of " + std::string(op_name) + " is not in the graph");
    specs.push_back(spec(in));
  }
  Node& n = append(op);
  n.attrs = std::move(attrs);
  n.vars = std::move(vars);
  for (Output in : inputs) n.inputs.push_back(in.node);
  // A throwing shape function must not leave a half-made node behind.
  try {
    n.spec = op.infer(InferContext(specs, n.attrs, n.name));
  } catch (...) {
    nodes_.pop_back();
    throw;
  }
  return Output{n.id, id_};
}

Output Graph::placeholder(std::string_view name, DType dtype, const Shape& shape) {
  Output o = add_node("Placeholder", {},
                      Attrs{{"dtype", static_cast<std::int64_t>(dtype)},
                            {"shape", std::vector<std::int64_t>(shape.dims().begin(), shape.dims().end())}},
                      {});
  nodes_[static_cast<std::size_t>(o.node)].name = std::string(name);
  return notify(o);
}

Output Graph::constant(Tensor value) {
  Attrs attrs{{"dtype", static_cast<std::int64_t>(value.dtype())},
              {"shape", std::vector<std::int64_t>(value.shape().dims().begin(), value.shape().dims().end())}};
  Output o = add_node("Const", {}, std::move(attrs), {});
  nodes_[static_cast<std::size_t>(o.node)].value = std::move(value);
  return notify(o);
}

Output Graph::read(const std::shared_ptr<Variable>& var) {
  Attrs attrs{{"dtype", static_cast<std::int64_t>(var->dtype())},
              {"shape", std::vector<std::int64_t>(var->shape().dims().begin(), var->shape().dims().end())}};
  return add("ReadVariable", {}, std::move(attrs), {VarUse{var, false}});
}

void Graph::add_control_input(int node, int dep) {
  TCTL_CHECK(dep < node, "control inputs must point to earlier nodes");
  auto& deps = nodes_[static_cast<std::size_t>(node)].control_inputs;
  if (std::find(deps.begin(), deps.end(), dep) == deps.end()) deps.push_back(dep);
}

void Graph::supersede(int node) { nodes_[static_cast<std::size_t>(node)].superseded = true; }

Graph::Scope::Scope(Graph& g, std::string layer, std::string device, Phase phase)
    : g_(g), layer_(std::move(g.layer_)), device_(std::move(g.device_)), phase_(g.phase_) {
  g_.layer_ = std::move(layer);
  g_.device_ = std::move(device);
  g_.phase_ = phase;
}

Graph::Scope::~Scope() {
  g_.layer_ = std::move(layer_);
  g_.device_ = std::move(device_);
  g_.phase_ = phase_;
}

}  // namespace tctl
