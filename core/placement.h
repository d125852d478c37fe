// The placement pass: resolves each node's requested device to a Device that has a kernel for its op.
#pragma once

#include <string>
#include <vector>

#include "core/graph.h"

namespace tctl {

struct PlacementOptions {
  // A missing device or kernel is an error instead of a fall-back to the CPU.
  bool strict = false;
};

struct Placement {
  std::vector<Device*> devices;       // per node id; null for nodes not placed
  std::vector<std::string> warnings;  // one per node that fell back to the CPU
};

// Places the nodes marked in `needed` (by id). Throws RuntimeError in strict mode when a node cannot run
// where it asked to.
Placement place_nodes(const Graph& g, const std::vector<char>& needed, const PlacementOptions& options);

}  // namespace tctl
