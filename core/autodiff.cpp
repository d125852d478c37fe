#include "core/autodiff.h"

#include <algorithm>
#include <map>

#include "core/errors.h"
#include "core/ops/state.h"

namespace tctl {

std::vector<Output> masked_op_grad(GradBuilder& g, std::string_view op, Attrs attrs) {
  std::vector<Output> inputs{g.dy(), g.x(0)};
  const bool masked = g.num_inputs() == 2;
  if (masked) inputs.push_back(g.x(1));
  std::vector<Output> grads{g.op(op, std::move(inputs), std::move(attrs))};
  if (masked) grads.emplace_back();
  return grads;
}

std::vector<Output> gradients(Graph& g, Output loss, std::span<const Output> xs) {
  TCTL_CHECK(g.spec(loss).shape.rank() == 0, "gradients() needs a scalar loss");
  const int n = loss.node + 1;

  // Only nodes on a path from some x to the loss need a gradient.
  std::vector<char> reaches_loss(static_cast<std::size_t>(n), 0);
  reaches_loss[static_cast<std::size_t>(loss.node)] = 1;
  for (int id = loss.node; id >= 0; --id) {
    if (!reaches_loss[static_cast<std::size_t>(id)]) continue;
    for (int in : g.node(id).inputs) reaches_loss[static_cast<std::size_t>(in)] = 1;
  }

  // Incoming gradients per node, in the order they were produced; summed once all have arrived.
  std::vector<std::vector<Output>> pending(static_cast<std::size_t>(n));
  std::vector<Output> grad(static_cast<std::size_t>(n));
  std::vector<char> wanted(static_cast<std::size_t>(n), 0);
  for (Output x : xs) wanted[static_cast<std::size_t>(x.node)] = 1;
  // Nodes whose value depends on some x: only they need a gradient (not the input batch, for instance).
  std::vector<char> depends(static_cast<std::size_t>(n), 0);
  for (int id = 0; id < n; ++id) {
    char d = wanted[static_cast<std::size_t>(id)];
    for (int in : g.node(id).inputs) d |= depends[static_cast<std::size_t>(in)];
    depends[static_cast<std::size_t>(id)] = d;
  }

  {
    Graph::Scope scope(g, g.node(loss).layer, g.node(loss).device, Phase::kBackward);
    pending[static_cast<std::size_t>(loss.node)].push_back(g.scalar(1.0f));
  }

  // Node ids are a topological order, so walking them backwards sees every consumer before its producer.
  for (int id = loss.node; id >= 0; --id) {
    auto& incoming = pending[static_cast<std::size_t>(id)];
    if (incoming.empty() || !reaches_loss[static_cast<std::size_t>(id)]) continue;
    const Node node = g.node(id);  // copy: adding nodes may move the vector
    Graph::Scope scope(g, node.layer, node.device, Phase::kBackward);
    Output dy = incoming.size() == 1 ? incoming[0] : g.add("AddN", incoming);
    grad[static_cast<std::size_t>(id)] = dy;
    if (node.inputs.empty()) continue;
    if (!node.op->grad) {
      bool needed = false;
      for (int in : node.inputs) needed |= reaches_loss[static_cast<std::size_t>(in)] != 0;
      TCTL_CHECK(!needed || node.op == &ops::read_variable(), "op " + node.op->name + " has no gradient");
      continue;
    }
    std::vector<char> needed(node.inputs.size());
    for (std::size_t i = 0; i < needed.size(); ++i) needed[i] = depends[static_cast<std::size_t>(node.inputs[i])];
    GradBuilder builder(g, node, dy, &needed);
    std::vector<Output> dxs = node.op->grad(builder);
    TCTL_CHECK(dxs.size() == node.inputs.size(), "gradient of " + node.op->name + " returned a wrong count");
    for (std::size_t i = 0; i < dxs.size(); ++i) {
      if (dxs[i].valid() && needed[i]) pending[static_cast<std::size_t>(node.inputs[i])].push_back(dxs[i]);
    }
  }

  std::vector<Output> out;
  for (Output x : xs) {
    Output dx = grad[static_cast<std::size_t>(x.node)];
    if (!dx.valid()) dx = g.add("ZerosLike", {x});
    out.push_back(dx);
  }
  return out;
}

void add_auto_control_dependencies(Graph& g) {
  struct State {
    int last_write = -1;
    std::vector<int> reads_since_write;
  };
  std::map<const Variable*, State> states;
  // Consumers of each node, to order a write after the users of the reads it would overwrite.
  std::vector<std::vector<int>> consumers(static_cast<std::size_t>(g.size()));
  for (const Node& n : g.nodes())
    for (int in : n.inputs) consumers[static_cast<std::size_t>(in)].push_back(n.id);

  for (const Node& n : g.nodes()) {
    for (const VarUse& use : n.vars) {
      State& s = states[use.var.get()];
      if (s.last_write >= 0 && s.last_write != n.id) g.add_control_input(n.id, s.last_write);
      if (!use.write) {
        s.reads_since_write.push_back(n.id);
        continue;
      }
      for (int r : s.reads_since_write) {
        if (r == n.id) continue;
        g.add_control_input(n.id, r);
        // Only consumers created before this write can be ordered before it without making a cycle.
        for (int c : consumers[static_cast<std::size_t>(r)])
          if (c < n.id && !(g.node(c).superseded && consumers[static_cast<std::size_t>(c)].empty()))
            g.add_control_input(n.id, c);
      }
      s.reads_since_write.clear();
      s.last_write = n.id;
    }
  }
}

std::vector<VariableConflict> find_unordered_conflicts(const Graph& g) {
  const int n = g.size();
  // reach[i] = the set of nodes with a path to i, as a bitset; graphs here have at most a few thousand nodes.
  std::vector<std::vector<std::uint64_t>> reach(static_cast<std::size_t>(n));
  const std::size_t words = static_cast<std::size_t>((n + 63) / 64);
  for (const Node& node : g.nodes()) {
    auto& r = reach[static_cast<std::size_t>(node.id)];
    r.assign(words, 0);
    auto merge = [&](int dep) {
      const auto& d = reach[static_cast<std::size_t>(dep)];
      for (std::size_t w = 0; w < words; ++w) r[w] |= d[w];
      r[static_cast<std::size_t>(dep) / 64] |= std::uint64_t{1} << (dep % 64);
    };
    for (int in : node.inputs) merge(in);
    for (int in : node.control_inputs) merge(in);
  }
  auto ordered = [&](int a, int b) {
    return (reach[static_cast<std::size_t>(b)][static_cast<std::size_t>(a) / 64] >> (a % 64)) & 1;
  };

  std::map<const Variable*, std::vector<std::pair<int, bool>>> uses;
  for (const Node& node : g.nodes())
    for (const VarUse& use : node.vars) uses[use.var.get()].emplace_back(node.id, use.write);

  std::vector<VariableConflict> out;
  for (const auto& [var, list] : uses) {
    for (std::size_t i = 0; i < list.size(); ++i) {
      for (std::size_t j = i + 1; j < list.size(); ++j) {
        auto [a, wa] = list[i];
        auto [b, wb] = list[j];
        if (a == b || !(wa || wb)) continue;
        if (!ordered(a, b) && !ordered(b, a)) out.push_back({a, b, var->name()});
      }
    }
  }
  return out;
}

}  // namespace tctl
