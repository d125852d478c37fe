#include "models/io/graph_export.h"

#include <fmt/format.h>

#include <map>

#include "core/profiler.h"

namespace tctl {

namespace {

const char* phase_colour(Phase p) {
  switch (p) {
    case Phase::kForward:
      return "#444444";
    case Phase::kBackward:
      return "#c0392b";
    case Phase::kUpdate:
      return "#27864a";
  }
  return "#444444";
}

// The CPU's blue, else the colour the device's backend registered, else grey.
std::string device_colour(const std::string& device) {
  if (device.starts_with("cpu")) return "#d6e6f5";
  const BackendDef* backend = find_backend(device);
  return backend != nullptr && !backend->graph_colour.empty() ? backend->graph_colour : "#e6e6e6";
}

// A DOT double-quoted string: quotes and backslashes escaped, line breaks as \n (a centred line).
std::string dot_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string device_of(const Node& n, const GraphExportOptions& o) {
  const auto id = static_cast<std::size_t>(n.id);
  return id < o.devices.size() && !o.devices[id].empty() ? o.devices[id] : n.device;
}

std::string node_line(const Node& n, const GraphExportOptions& o) {
  std::string label =
      n.name + "\n" + std::string(n.op->name) + " " + std::string(dtype_name(n.spec.dtype)) + n.spec.shape.to_string();
  bool reads = false, writes = false;
  for (const auto& use : n.vars) {
    label += std::string("\n") + (use.write ? "writes " : "reads ") + use.var->name();
    (use.write ? writes : reads) = true;
  }
  const std::string device = device_of(n, o);
  if (device != n.device) label += "\n" + device + " (asked " + n.device + ")";
  std::string attrs = fmt::format("label={}, fillcolor=\"{}\", color=\"{}\"", dot_string(label), device_colour(device),
                                  phase_colour(n.phase));
  if (writes)
    attrs += ", peripheries=2";
  else if (reads)
    attrs += ", shape=cylinder";
  return fmt::format("n{} [{}];\n", n.id, attrs);
}

}  // namespace

GraphCounts graph_counts(const Graph& g) {
  GraphCounts c;
  c.nodes = g.size();
  for (const auto& n : g.nodes()) {
    c.data_edges += static_cast<std::int64_t>(n.inputs.size());
    c.control_edges += static_cast<std::int64_t>(n.control_inputs.size());
  }
  return c;
}

std::string graph_dot(const Graph& g, const GraphExportOptions& o) {
  const GraphCounts counts = graph_counts(g);
  std::string out = fmt::format(
      "// {}: {} nodes, {} data edges (solid), {} control edges (dashed).\n"
      "// Fill: the device (cpu blue, cuda green, sim yellow). Outline: forward grey, backward red, update green.\n"
      "// A cylinder reads a variable; a double border writes one. Clusters are layers.\n",
      o.title, counts.nodes, counts.data_edges, counts.control_edges);
  out += "digraph " + dot_string(o.title) + " {\n";
  out += "  graph [rankdir=TB, fontname=\"Helvetica\", labelloc=t, label=" +
         dot_string(fmt::format("{} ({} nodes)", o.title, counts.nodes)) + "];\n";
  out += "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10];\n";
  out += "  edge [color=\"#555555\"];\n";
  // Layers in the order their first node was added; nodes outside any layer at the top level.
  std::vector<std::string> layers;
  std::map<std::string, std::vector<int>> members;
  for (const auto& n : g.nodes()) {
    if (n.layer.empty()) {
      out += "  " + node_line(n, o);
      continue;
    }
    auto [it, added] = members.try_emplace(n.layer);
    if (added) layers.push_back(n.layer);
    it->second.push_back(n.id);
  }
  for (std::size_t i = 0; i < layers.size(); ++i) {
    out += fmt::format("  subgraph cluster_{} {{\n    label={}; style=\"rounded\"; color=\"#999999\";\n", i,
                       dot_string(layers[i]));
    for (int id : members[layers[i]]) out += "    " + node_line(g.node(id), o);
    out += "  }\n";
  }
  for (const auto& n : g.nodes()) {
    for (int in : n.inputs) out += fmt::format("  n{} -> n{};\n", in, n.id);
    for (int dep : n.control_inputs) out += fmt::format("  n{} -> n{} [style=dashed, color=\"#999999\"];\n", dep, n.id);
  }
  out += "}\n";
  return out;
}

nlohmann::json graph_json(const Graph& g, const GraphExportOptions& o) {
  const GraphCounts counts = graph_counts(g);
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& n : g.nodes()) {
    nlohmann::json vars = nlohmann::json::array();
    for (const auto& use : n.vars) vars.push_back({{"name", use.var->name()}, {"write", use.write}});
    nodes.push_back({{"id", n.id},
                     {"name", n.name},
                     {"op", n.op->name},
                     {"layer", n.layer},
                     {"phase", phase_name(n.phase)},
                     {"device", device_of(n, o)},
                     {"requested_device", n.device},
                     {"dtype", dtype_name(n.spec.dtype)},
                     {"shape", std::vector<std::int64_t>(n.spec.shape.dims().begin(), n.spec.shape.dims().end())},
                     {"inputs", n.inputs},
                     {"control_inputs", n.control_inputs},
                     {"variables", vars}});
  }
  return {{"title", o.title},
          {"nodes", nodes},
          {"counts",
           {{"nodes", counts.nodes}, {"data_edges", counts.data_edges}, {"control_edges", counts.control_edges}}}};
}

}  // namespace tctl
