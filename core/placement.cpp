#include "core/placement.h"

#include <map>
#include <numeric>

#include "core/ops/state.h"

namespace tctl {

namespace {

// Groups of nodes that must share a device: those touching a common variable.
class Groups {
 public:
  explicit Groups(int n) : parent_(static_cast<std::size_t>(n)) { std::iota(parent_.begin(), parent_.end(), 0); }
  int root(int i) {
    while (parent_[static_cast<std::size_t>(i)] != i) {
      parent_[static_cast<std::size_t>(i)] = parent_[static_cast<std::size_t>(parent_[static_cast<std::size_t>(i)])];
      i = parent_[static_cast<std::size_t>(i)];
    }
    return i;
  }
  // The smaller id becomes the root, so a group's root is its first node.
  void join(int a, int b) {
    a = root(a);
    b = root(b);
    if (a == b) return;
    if (b < a) std::swap(a, b);
    parent_[static_cast<std::size_t>(b)] = a;
  }

 private:
  std::vector<int> parent_;
};

bool lives_on_host(const Node& n, bool fed) { return fed || n.op == &ops::placeholder() || n.op == &ops::constant(); }

}  // namespace

Placement place_nodes(const Graph& g, const std::vector<char>& needed, const std::vector<char>& fed,
                      const PlacementOptions& options) {
  const int n = g.size();
  Placement p;
  p.devices.assign(static_cast<std::size_t>(n), nullptr);
  auto fall_back = [&](const Node& node, const std::string& why) {
    if (options.strict) throw PlacementError("cannot place " + node.name + ": " + why + " (--strict-placement)");
    p.warnings.push_back(node.name + ": " + why + ", running on cpu");
  };

  // The device each node asks for, where it exists.
  Groups groups(n);
  std::map<const Variable*, int> first_user;
  for (const Node& node : g.nodes()) {
    const auto id = static_cast<std::size_t>(node.id);
    if (!needed[id]) continue;
    if (lives_on_host(node, fed[id] != 0)) {
      p.devices[id] = cpu_device();
      continue;
    }
    Device* d = DeviceRegistry::instance().find(node.device);
    if (d == nullptr) {
      fall_back(node, "device " + node.device + " is not available (" +
                          DeviceRegistry::instance().why_absent(node.device) + ")");
      d = cpu_device();
    }
    p.devices[id] = d;
    for (const VarUse& use : node.vars) {
      auto [it, first] = first_user.emplace(use.var.get(), node.id);
      if (!first) groups.join(it->second, node.id);
    }
  }

  // Each group runs where its first node asked, unless the device does not support one of its nodes.
  std::vector<Device*> group_device(static_cast<std::size_t>(n), nullptr);
  for (const Node& node : g.nodes()) {
    const auto id = static_cast<std::size_t>(node.id);
    if (!needed[id] || lives_on_host(node, fed[id] != 0)) continue;
    const auto r = static_cast<std::size_t>(groups.root(node.id));
    if (group_device[r] == nullptr) group_device[r] = p.devices[r];
    Device*& d = group_device[r];
    if (d != cpu_device() && !d->supports(node)) {
      fall_back(node, node.op->kernel(d->kind()) == nullptr
                          ? "op " + node.op->name + " has no kernel for " + d->name()
                          : d->name() + " does not support this " + node.op->name + " (its shapes or attributes)");
      d = cpu_device();
    }
  }
  // A group that fell back part-way moves whole, nodes placed before the fall-back included.
  for (const Node& node : g.nodes()) {
    const auto id = static_cast<std::size_t>(node.id);
    if (needed[id] && !lives_on_host(node, fed[id] != 0))
      p.devices[id] = group_device[static_cast<std::size_t>(groups.root(node.id))];
  }
  return p;
}

Placement place_all(const Graph& g, std::span<const Output> fed, const PlacementOptions& options) {
  std::vector<char> needed(static_cast<std::size_t>(g.size()), 1), is_fed(static_cast<std::size_t>(g.size()), 0);
  for (Output o : fed) is_fed[static_cast<std::size_t>(o.node)] = 1;
  return place_nodes(g, needed, is_fed, options);
}

}  // namespace tctl
