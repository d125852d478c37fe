// tensorctl devices: what this machine and this build can run on, like `caffe device_query` and
// `nvidia-smi -L`: the CPU (processor, cores, vector instructions, BLAS and its threads), each GPU (name,
// memory, compute capability, driver and runtime), the simulated devices, and for a backend without devices,
// why it has none.
#include <cblas.h>

#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "core/device.h"

namespace tctl::app {

namespace {
struct DevicesFlags {
  bool json = false;
};

using Properties = std::vector<std::pair<std::string, std::string>>;

// The CPU's properties, with the BLAS library the CPU kernels call.
Properties cpu_properties() {
  Properties p = cpu_device()->properties();
  std::string blas = openblas_get_config();
  while (!blas.empty() && blas.back() == ' ') blas.pop_back();
  p.emplace_back("blas", blas);
  p.emplace_back("blas threads", std::to_string(openblas_get_num_threads()));
  return p;
}

std::string joined(const Properties& p) {
  std::string out;
  for (const auto& [key, value] : p) out += (out.empty() ? "" : ", ") + key + " " + value;
  return out;
}

int run_devices(const DevicesFlags& f) {
  const DeviceRegistry& registry = DeviceRegistry::instance();
  std::vector<std::pair<std::string, Properties>> rows{{"cpu", cpu_properties()}};
  for (const auto& d : registry.devices()) rows.emplace_back(d->name(), d->properties());
  if (f.json) {
    nlohmann::json out{{"devices", nlohmann::json::array()}, {"backends", nlohmann::json::array()}};
    for (const auto& [name, props] : rows) {
      nlohmann::json d{{"name", name}};
      for (const auto& [key, value] : props) d[key] = value;
      out["devices"].push_back(d);
    }
    for (const auto& b : registry.backends()) out["backends"].push_back({{"name", b.name}, {"why_none", b.why_none}});
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  for (const auto& [name, props] : rows) std::printf("%s\n", fmt::format("{:<8} {}", name, joined(props)).c_str());
  for (const auto& b : registry.backends())
    if (!b.why_none.empty()) std::printf("%s\n", fmt::format("{:<8} none: {}", b.name, b.why_none).c_str());
  return 0;
}

void define_flags(CLI::App& cmd, DevicesFlags& flags) { cmd.add_flag("--json", flags.json, "Print the list as JSON"); }

}  // namespace

Command add_devices_command(CLI::App& app) {
  return add_command<DevicesFlags>(app, "devices", "List the devices this machine and build can run on", define_flags,
                                   run_devices);
}

}  // namespace tctl::app
