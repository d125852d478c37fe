// The placement pass: resolves each node's requested device to a Device that supports it (Device::supports:
// by default, a kernel for its op there).
//
// - Fed placeholders and constants live on the host; the executor copies them to where they are used. A
//   value fed already on a device stays there when only copies use it (PlanNode::feed_anywhere).
// - Colocation: a variable and every node that reads or updates it run on one device, the one asked for
//   by the first of those nodes (the layer's forward read), so an optimizer's update runs where its
//   weights live. Nodes sharing a variable (an update touching a weight and its slots) share the device.
// - Soft placement: a node whose device is absent, or does not support it, runs on the CPU with
//   one warning naming it (its whole colocation group moves with it). With `strict` that is an error.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/errors.h"
#include "core/graph.h"

namespace tctl {

struct PlacementOptions {
  // A missing device or kernel is an error (PlacementError) instead of a fall-back to the CPU.
  bool strict = false;
  // When set, each new plan reports every node it runs, copies included, one line each:
  // "dense_1/MatMul (MatMul): sim:0".
  std::function<void(const std::string&)> log;
};

// A node that cannot run where it asked to, under strict placement: the user's choice of device, exit 2.
class PlacementError : public Error {
 public:
  using Error::Error;
};

struct Placement {
  std::vector<Device*> devices;       // per node id; null for nodes not placed
  std::vector<std::string> warnings;  // one per node that fell back to the CPU
};

// Places the nodes marked in `needed` (by id); `fed` marks the nodes whose values are fed.
Placement place_nodes(const Graph& g, const std::vector<char>& needed, const std::vector<char>& fed,
                      const PlacementOptions& options);
// Places every node of `g`, with `fed` fed: how a caller finds a PlacementError under strict placement
// before it writes anything, rather than at the first run.
Placement place_all(const Graph& g, std::span<const Output> fed, const PlacementOptions& options);

}  // namespace tctl
