#include "core/device_graph.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <queue>
#include <utility>

#include "core/errors.h"
#include "core/ops/state.h"
#include "core/variable.h"

namespace tctl {

namespace {

std::vector<std::vector<int>> predecessors(const Plan& plan) {
  std::vector<std::vector<int>> preds(plan.nodes.size());
  for (std::size_t i = 0; i < plan.nodes.size(); ++i)
    for (int s : plan.nodes[i].successors) preds[static_cast<std::size_t>(s)].push_back(static_cast<int>(i));
  return preds;
}

// Kahn's order over the plan's edges, data and control; ties in plan order.
std::vector<int> topological_order(const Plan& plan, const std::vector<std::vector<int>>& preds) {
  const std::size_t n = plan.nodes.size();
  std::vector<int> waiting(n);
  std::priority_queue<int, std::vector<int>, std::greater<>> ready;
  for (std::size_t i = 0; i < n; ++i) {
    waiting[i] = static_cast<int>(preds[i].size());
    if (waiting[i] == 0) ready.push(static_cast<int>(i));
  }
  std::vector<int> order;
  while (!ready.empty()) {
    const int i = ready.top();
    ready.pop();
    order.push_back(i);
    for (int s : plan.nodes[static_cast<std::size_t>(i)].successors)
      if (--waiting[static_cast<std::size_t>(s)] == 0) ready.push(s);
  }
  TCTL_CHECK(order.size() == n, "a plan with a cycle");
  return order;
}

// Each node's segment (-1 for none): nodes on a recording device, fed ones excepted, grouped by device and
// level. A node's level on its device is the most times a path into it left that device and came back;
// `up[k][i]` is the highest level of device k's members upstream of node i (itself included), -1 if none.
std::vector<int> assign_segments(Plan& plan, const std::vector<int>& order,
                                 const std::vector<std::vector<int>>& preds) {
  std::vector<Device*> devices;
  for (Device* d : plan.stream_devices)
    if (d->can_record()) devices.push_back(d);
  const std::size_t n = plan.nodes.size();
  std::vector<int> segment(n, -1);
  if (devices.empty()) return segment;
  std::vector<std::vector<int>> up(devices.size(), std::vector<int>(n, -1));
  std::map<std::pair<std::size_t, int>, int> index;  // (device, level) -> segment
  for (int i : order) {
    const PlanNode& pn = plan.nodes[static_cast<std::size_t>(i)];
    for (std::size_t k = 0; k < devices.size(); ++k) {
      const bool member = pn.device == devices[k] && pn.feed < 0;
      int reach = -1, level = 0;
      for (int p : preds[static_cast<std::size_t>(i)]) {
        const int above = up[k][static_cast<std::size_t>(p)];
        reach = std::max(reach, above);
        if (!member || above < 0) continue;
        const bool same =
            segment[static_cast<std::size_t>(p)] >= 0 && plan.nodes[static_cast<std::size_t>(p)].device == devices[k];
        level = std::max(level, same ? above : above + 1);
      }
      if (!member) {
        up[k][static_cast<std::size_t>(i)] = reach;
        continue;
      }
      up[k][static_cast<std::size_t>(i)] = level;
      auto [it, added] = index.emplace(std::pair{k, level}, static_cast<int>(plan.graph_segments.size()));
      if (added) plan.graph_segments.push_back({.device = devices[k], .level = level});
      segment[static_cast<std::size_t>(i)] = it->second;
      plan.graph_segments[static_cast<std::size_t>(it->second)].members.push_back(i);
    }
  }
  return segment;
}

// Whether a node outside every segment reads node p's value. (Its segment is then refused: static_refusal.)
bool read_outside_segments(const Plan& plan, int p, const std::vector<int>& segment) {
  for (int s : plan.nodes[static_cast<std::size_t>(p)].successors) {
    const auto& in = plan.nodes[static_cast<std::size_t>(s)].inputs;
    if (segment[static_cast<std::size_t>(s)] < 0 && std::find(in.begin(), in.end(), p) != in.end()) return true;
  }
  return false;
}

// The variable whose buffer node i's value shares (a read of it, or a Reshape of one), or null.
const Variable* aliased_variable(const Plan& plan, int i) {
  const PlanNode& pn = plan.nodes[static_cast<std::size_t>(i)];
  if (pn.node->op == &ops::read_variable()) return pn.node->vars.empty() ? nullptr : pn.node->vars[0].var.get();
  if (pn.node->op->aliases_output && !pn.inputs.empty()) return aliased_variable(plan, pn.inputs[0]);
  return nullptr;
}

// Why a member reads a variable's buffer after a member that updates the variable, or "". Run node by node,
// that update copies the buffer first, since the reader still holds it; recorded, the copy would be
// recorded too, and every replay would copy the recording's buffer over the variable's before updating.
std::string read_after_update(const Plan& plan, const GraphSegment& seg) {
  std::map<const Variable*, std::string> updated;  // the variables written so far (this member's too), by whom
  for (int m : seg.members) {
    const PlanNode& pn = plan.nodes[static_cast<std::size_t>(m)];
    for (const VarUse& use : pn.node->vars)
      if (use.write) updated.emplace(use.var.get(), pn.node->name);
    for (int in : pn.inputs) {
      const Variable* v = aliased_variable(plan, in);
      if (const auto it = v != nullptr ? updated.find(v) : updated.end(); it != updated.end())
        return "node " + pn.node->name + " reads variable " + v->name() +
               (it->second == pn.node->name ? " as it" : " after " + it->second) +
               " updates it, which a replay cannot follow";
    }
  }
  return "";
}

// Why a segment can never be replayed, or "".
std::string static_refusal(const Plan& plan, const GraphSegment& seg, const std::vector<int>& segment) {
  // Its variables, those of the reads it borrows included (describe_segments lists them all).
  for (const Variable* v : seg.vars) {
    const LockingMode mode = v->locking_mode();
    if (mode != LockingMode::kMutex && mode != LockingMode::kProcess)
      return "variable " + v->name() + " uses locking mode " + std::string(locking_mode_name(mode)) +
             ", whose buffers a replay cannot follow";
  }
  for (int m : seg.members) {
    const PlanNode& pn = plan.nodes[static_cast<std::size_t>(m)];
    const OpDef& op = *pn.node->op;
    const std::string who = "node " + pn.node->name + " (" + op.name + ")";
    if (op.may_skip) return who + " may declare its output dead, which a replay cannot";
    // It meets the other replicas under its step's key, which a replay would not renew.
    if (op.collective) return who + " meets other replicas by its step, which a replay would repeat";
    // A kernel every device shares does its work on the host (an assignment writes host-addressable memory
    // at once): a recording would not hold it. Copies, reads and constants are what recording expects.
    if (pn.kernel == op.every_device_kernel && &op != &ops::copy() && &op != &ops::read_variable() &&
        &op != &ops::constant())
      return who + " runs on the host for every device, which a recording does not hold";
    // A replay does not run it again, so its slot in the frame stays empty: a node outside every segment
    // would find nothing there. A replayed segment reads the buffer it recorded, and checks the variable.
    if (op.aliases_output && read_outside_segments(plan, m, segment))
      return who + " lends a buffer it does not own to a node that runs outside the segments";
  }
  return read_after_update(plan, seg);
}

// The staged copies, the values read from outside, the variables, the name and any refusal of each segment.
void describe_segments(Plan& plan, const std::vector<int>& segment) {
  std::map<Device*, int> per_device;
  for (std::size_t s = 0; s < plan.graph_segments.size(); ++s) {
    GraphSegment& seg = plan.graph_segments[s];
    auto add_vars = [&](const PlanNode& pn) {
      for (const VarUse& use : pn.node->vars) {
        Variable* v = use.var.get();
        if (std::find(seg.vars.begin(), seg.vars.end(), v) == seg.vars.end()) seg.vars.push_back(v);
        if (use.write && std::find(seg.written.begin(), seg.written.end(), v) == seg.written.end())
          seg.written.push_back(v);
      }
    };
    for (int m : seg.members) {
      const PlanNode& pn = plan.nodes[static_cast<std::size_t>(m)];
      add_vars(pn);
      (pn.node->op->aliases_output ? seg.lent : seg.outputs).push_back(m);
      const bool copy = pn.node->op == &ops::copy();
      for (int in : pn.inputs) {
        const PlanNode& producer = plan.nodes[static_cast<std::size_t>(in)];
        if (segment[static_cast<std::size_t>(in)] == static_cast<int>(s)) continue;
        if (copy) {
          seg.staged.push_back(m);
        } else if (segment[static_cast<std::size_t>(in)] >= 0 && producer.node->op->aliases_output &&
                   !read_outside_segments(plan, in, segment)) {
          // A variable read of another segment: its slot is empty after a replay; the variable is what counts.
          add_vars(producer);
          if (std::find(seg.borrowed.begin(), seg.borrowed.end(), in) == seg.borrowed.end()) seg.borrowed.push_back(in);
        } else if (std::find(seg.outside.begin(), seg.outside.end(), in) == seg.outside.end()) {
          seg.outside.push_back(in);
        }
      }
    }
    seg.refused = static_refusal(plan, seg, segment);
    seg.name = seg.device->name() + " segment " + std::to_string(per_device[seg.device]++) + " (level " +
               std::to_string(seg.level) + ", " + std::to_string(seg.members.size()) + " nodes)";
  }
}

// The run's order with each segment as one entry: Kahn's order over the segments and the other nodes, ties
// broken by the topological position of their first node. On one device the levels make this a DAG: a path
// from a segment back into it would have left the device and come back, and so reached a higher level.
void order_run(Plan& plan, const std::vector<int>& order, const std::vector<int>& segment) {
  const int n = static_cast<int>(plan.nodes.size());
  auto key = [&](int i) {
    return segment[static_cast<std::size_t>(i)] >= 0 ? n + segment[static_cast<std::size_t>(i)] : i;
  };
  const std::size_t keys = static_cast<std::size_t>(n) + plan.graph_segments.size();
  std::vector<int> waiting(keys, 0), first(keys, n);
  std::vector<std::vector<int>> nodes_of(keys);
  for (std::size_t pos = 0; pos < order.size(); ++pos) {
    const int i = order[pos];
    const auto k = static_cast<std::size_t>(key(i));
    first[k] = std::min(first[k], static_cast<int>(pos));
    nodes_of[k].push_back(i);
    for (int s : plan.nodes[static_cast<std::size_t>(i)].successors)
      if (key(s) != key(i)) ++waiting[static_cast<std::size_t>(key(s))];
  }
  std::priority_queue<std::pair<int, int>, std::vector<std::pair<int, int>>, std::greater<>> ready;
  for (std::size_t k = 0; k < keys; ++k)
    if (!nodes_of[k].empty() && waiting[k] == 0) ready.push({first[k], static_cast<int>(k)});
  while (!ready.empty()) {
    const int k = ready.top().second;
    ready.pop();
    plan.graph_order.push_back(k < n ? k : -1 - (k - n));
    for (int i : nodes_of[static_cast<std::size_t>(k)])
      for (int s : plan.nodes[static_cast<std::size_t>(i)].successors) {
        const auto ks = static_cast<std::size_t>(key(s));
        if (static_cast<int>(ks) != k && --waiting[ks] == 0) ready.push({first[ks], static_cast<int>(ks)});
      }
  }
  std::size_t entries = 0;
  for (const auto& v : nodes_of) entries += v.empty() ? 0 : 1;
  // With two recording devices, segments counted on each device's levels can need each other (a1 on sim:0
  // feeds b1 on sim:1, b2 on sim:1 feeds a2 on sim:0): the plan then runs without segments.
  if (plan.graph_order.size() != entries) {
    plan.graph_segments.clear();
    plan.graph_order.clear();
  }
}

}  // namespace

void plan_device_graphs(Plan& plan) {
  plan.graph_segments.clear();
  plan.graph_order.clear();
  const std::vector<std::vector<int>> preds = predecessors(plan);
  const std::vector<int> order = topological_order(plan, preds);
  const std::vector<int> segment = assign_segments(plan, order, preds);
  if (plan.graph_segments.empty()) return;
  describe_segments(plan, segment);
  order_run(plan, order, segment);
}

void segment_signature(const GraphSegment& segment, const SegmentState& state, const std::vector<Tensor>& values,
                       std::int64_t batch_offset, std::vector<const void*>& out) {
  out.clear();
  out.reserve(segment.outside.size() + state.staging.size() + segment.vars.size() + segment.outputs.size() + 1);
  for (int i : segment.outside) out.push_back(values[static_cast<std::size_t>(i)].raw_data());
  for (const Tensor& t : state.staging) out.push_back(t.raw_data());
  for (const Variable* v : segment.vars) out.push_back(v->buffer_address());
  for (int i : segment.outputs) out.push_back(values[static_cast<std::size_t>(i)].raw_data());
  out.push_back(reinterpret_cast<const void*>(static_cast<std::uintptr_t>(batch_offset)));
}

std::string signature_entry_name(const Plan& plan, const GraphSegment& segment, std::size_t index) {
  auto node = [&](int i) { return plan.nodes[static_cast<std::size_t>(i)].node->name; };
  if (index < segment.outside.size()) return "the input " + node(segment.outside[index]);
  index -= segment.outside.size();
  if (index < segment.staged.size()) return "the staging buffer of " + node(segment.staged[index]);
  index -= segment.staged.size();
  if (index < segment.vars.size()) return "the variable " + segment.vars[index]->name();
  index -= segment.vars.size();
  if (index < segment.outputs.size()) return "the output of " + node(segment.outputs[index]);
  return "the run's batch offset";
}

}  // namespace tctl
