// Graph: the dataflow graph a model is traced into. Nodes hold an op, attributes, data inputs, control
// inputs, a device and their inferred output spec. Shapes are inferred as nodes are added, so a mismatch
// is reported while the model is built, naming the node and both shapes.
//
// A Graph is built by one thread (like TensorFlow's); once a Session runs it, it is read-only and may be
// read from any thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/attrs.h"
#include "core/op_registry.h"
#include "core/tensor.h"
#include "core/variable.h"

namespace tctl {

// The single output of a node (tensorctl ops have one output each). `graph` is the id of the graph that
// made it, or 0 when unknown; Graph::add refuses an input from another graph.
struct Output {
  int node = -1;
  std::uint32_t graph = 0;
  bool valid() const { return node >= 0; }
  friend bool operator==(Output a, Output b) { return a.node == b.node; }
};

// Using a value of one graph in another: the mistake of a thread that continues another thread's model
// without installing that model's graph with as_default().
class GraphError : public Error {
 public:
  using Error::Error;
};

// A variable a node touches; `write` marks updates, which automatic control dependencies order.
struct VarUse {
  std::shared_ptr<Variable> var;
  bool write = false;
};

// Which part of a training step a node belongs to; the profiler groups times by it.
enum class Phase { kForward, kBackward, kUpdate };

struct Node {
  int id = -1;
  const OpDef* op = nullptr;
  std::string name;    // unique in the graph: "dense_1/MatMul"
  std::string layer;   // the layer that created it, or "" outside any layer
  std::string device;  // as requested: "cpu", "cuda:0"; placement resolves it
  Phase phase = Phase::kForward;
  Attrs attrs;
  std::vector<int> inputs;
  std::vector<int> control_inputs;
  std::vector<VarUse> vars;
  Tensor value;  // the constant of a Const node
  // A fused op took over from this node: while no node reads it, the writes' automatic control dependencies
  // leave it out, and a plan runs it only when it is fetched.
  bool superseded = false;
  TensorSpec spec;
};

class Graph {
 public:
  Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Adds a node and infers its output spec. Throws ShapeError naming the node when inputs do not fit.
  Output add(std::string_view op, std::vector<Output> inputs, Attrs attrs = {}, std::vector<VarUse> vars = {});
  Output placeholder(std::string_view name, DType dtype, const Shape& shape);
  Output constant(Tensor value);
  Output scalar(float value) { return constant(Tensor::scalar(value)); }
  Output read(const std::shared_ptr<Variable>& var);

  // `dep` must finish before `node` starts.
  void add_control_input(int node, int dep);
  // Marks a node a fused op took over from (Node::superseded).
  void supersede(int node);

  const Node& node(int id) const { return nodes_[static_cast<std::size_t>(id)]; }
  const Node& node(Output o) const { return node(o.node); }
  const TensorSpec& spec(Output o) const { return node(o).spec; }
  int size() const { return static_cast<int>(nodes_.size()); }
  const std::vector<Node>& nodes() const { return nodes_; }

  // Sets the layer, device and phase of the nodes added while it lives; restores the previous ones after.
  class Scope {
   public:
    Scope(Graph& g, std::string layer, std::string device, Phase phase);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Graph& g_;
    std::string layer_, device_;
    Phase phase_;
  };
  const std::string& current_layer() const { return layer_; }
  const std::string& current_device() const { return device_; }
  Phase current_phase() const { return phase_; }

  // Called with every node once it is complete, in the order nodes are added: how eager execution runs
  // each op the moment a layer calls it (core/eager.h). At most one hook; an empty one removes it.
  using NodeHook = std::function<void(const Node&)>;
  void set_node_hook(NodeHook hook) { hook_ = std::move(hook); }

  // A process-unique id, stamped on every Output this graph returns.
  std::uint32_t id() const { return id_; }

  // Installs this graph as the calling thread's default graph until the returned guard is destroyed.
  class DefaultScope {
   public:
    explicit DefaultScope(Graph* g);
    ~DefaultScope();
    DefaultScope(const DefaultScope&) = delete;
    DefaultScope& operator=(const DefaultScope&) = delete;

   private:
    Graph* previous_;
  };
  [[nodiscard]] DefaultScope as_default() { return DefaultScope(this); }

 private:
  Node& append(const OpDef& op);
  Output add_node(std::string_view op, std::vector<Output> inputs, Attrs attrs, std::vector<VarUse> vars);
  Output notify(Output o) {
    if (hook_) hook_(node(o));
    return o;
  }

  std::uint32_t id_;
  std::vector<Node> nodes_;
  std::map<std::string, int, std::less<>> name_counts_;
  std::string layer_;
  std::string device_ = "cpu";
  Phase phase_ = Phase::kForward;
  NodeHook hook_;
};

// The calling thread's default graph: the one installed by the innermost as_default() on this thread, or
// else a graph of the thread's own, made on first use. Default graphs are per thread, as in TensorFlow.
Graph& default_graph();

}  // namespace tctl
