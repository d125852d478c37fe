// Reverse-mode automatic differentiation over a Graph, and the automatic control dependencies that keep
// stateful ops on one variable in program order.
#pragma once

#include <span>
#include <vector>

#include "core/graph.h"

namespace tctl {

// What an op's gradient function sees: its node, its inputs and output, and the gradient flowing in.
// New nodes are added to the same graph, in the forward node's layer, in the backward phase.
class GradBuilder {
 public:
  GradBuilder(Graph& g, const Node& node, Output dy, const std::vector<char>* needed = nullptr)
      : g_(g), node_(node), dy_(dy), needed_(needed) {}
  // Whether the gradient of input i is wanted: false for an input no differentiated value depends on (the
  // model's input batch). A gradient function may then return an invalid Output for it and save the work.
  bool needs(int i) const { return needed_ == nullptr || (*needed_)[static_cast<std::size_t>(i)] != 0; }
  Output x(int i) const { return Output{node_.inputs[static_cast<std::size_t>(i)], g_.id()}; }
  int num_inputs() const { return static_cast<int>(node_.inputs.size()); }
  Output y() const { return Output{node_.id, g_.id()}; }
  Output dy() const { return dy_; }
  const Attrs& attrs() const { return node_.attrs; }
  const TensorSpec& spec(Output o) const { return g_.spec(o); }
  int forward_id() const { return node_.id; }
  Output op(std::string_view name, std::vector<Output> inputs, Attrs attrs = {}) {
    return g_.add(name, std::move(inputs), std::move(attrs));
  }
  Graph& graph() { return g_; }

 private:
  Graph& g_;
  const Node& node_;
  Output dy_;
  const std::vector<char>* needed_;
};

// The gradient of an op whose input 0 is differentiated and whose optional input 1 is a mask that gets none
// (the global poolings, SelfAttention, RecurrenceOutput): the node `op` on (dy, x(0)[, x(1)]) with `attrs`.
std::vector<Output> masked_op_grad(GradBuilder& g, std::string_view op, Attrs attrs = {});

// d loss / d x for each x, for a scalar `loss`. An x the loss does not depend on gets zeros of its shape
// (a ZerosLike node, so an unknown batch dimension is fine). Gradients reaching a node along several paths are summed
// in a fixed order.
std::vector<Output> gradients(Graph& g, Output loss, std::span<const Output> xs);

// Adds control edges so stateful ops on the same variable run in program (node id) order, after
// TensorFlow's auto_control_deps: a write waits for the last write and for every read since it, and for
// the consumers of those reads (so it can update in place) but superseded ones nothing reads
// (Node::superseded); a read waits for the last write. Reads between two writes stay unordered among themselves.
void add_auto_control_dependencies(Graph& g);

// A pair of nodes that touch the same variable, at least one writing, with no path between them.
struct VariableConflict {
  int first = -1;
  int second = -1;
  std::string variable;
};
std::vector<VariableConflict> find_unordered_conflicts(const Graph& g);

}  // namespace tctl
