// The traced dataflow graph written out for people and tools (`tensorctl graph`): Graphviz DOT, and JSON.
//
// DOT: one box per node with its name, op, output dtype and shape; filled by device (cpu blue, cuda green,
// sim yellow, anything else grey), outlined by phase (forward dark grey, backward red, update green); a
// node that reads a variable is a cylinder, one that writes one has a double border, and both name the
// variables. Data edges are solid, control edges dashed. The nodes of each layer sit in a cluster named
// after the layer. JSON holds the same, node by node, with the counts.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/graph.h"

namespace tctl {

struct GraphExportOptions {
  std::string title;  // "digits_mlp: training graph"
  // The device each node runs on, by node id, as placement resolved it; an empty entry (or a short vector)
  // means the node's requested device.
  std::vector<std::string> devices;
};

// Edge counts of `g`: every data input and every control input is one edge.
struct GraphCounts {
  std::int64_t nodes = 0, data_edges = 0, control_edges = 0;
};
GraphCounts graph_counts(const Graph& g);

std::string graph_dot(const Graph& g, const GraphExportOptions& options);
nlohmann::json graph_json(const Graph& g, const GraphExportOptions& options);

}  // namespace tctl
