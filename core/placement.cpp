#include "core/placement.h"

#include "core/errors.h"

namespace tctl {

Placement place_nodes(const Graph& g, const std::vector<char>& needed, const PlacementOptions& options) {
  Placement p;
  p.devices.assign(static_cast<std::size_t>(g.size()), nullptr);
  for (const Node& n : g.nodes()) {
    if (!needed[static_cast<std::size_t>(n.id)]) continue;
    Device* d = DeviceRegistry::instance().find(n.device);
    std::string why;
    if (d == nullptr) {
      why = "device " + n.device + " is not available";
    } else if (n.op->kernel(d->kind()) == nullptr) {
      why = "op " + n.op->name + " has no kernel for " + n.device;
    }
    if (why.empty()) {
      p.devices[static_cast<std::size_t>(n.id)] = d;
      continue;
    }
    if (options.strict) throw RuntimeError("cannot place " + n.name + ": " + why);
    p.warnings.push_back(n.name + ": " + why + ", running on cpu");
    p.devices[static_cast<std::size_t>(n.id)] = cpu_device();
  }
  return p;
}

}  // namespace tctl
