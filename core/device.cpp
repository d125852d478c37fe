#include "core/device.h"

#include <cstdlib>
#include <new>

#include "core/errors.h"

namespace tctl {

namespace {

class CpuDevice final : public Device {
 public:
  DeviceKind kind() const override { return DeviceKind::kCpu; }
  const std::string& name() const override { return name_; }
  void* allocate(std::size_t bytes) override {
    // aligned_alloc wants a size that is a multiple of the alignment.
    std::size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (p == nullptr) throw RuntimeError("out of host memory allocating " + std::to_string(bytes) + " bytes");
    return p;
  }
  void deallocate(void* p, std::size_t) override { std::free(p); }

 private:
  std::string name_ = "cpu";
};

}  // namespace

std::string_view device_kind_name(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu: return "cpu";
    case DeviceKind::kCuda: return "cuda";
    case DeviceKind::kSim: return "sim";
  }
  return "?";
}

Device* cpu_device() {
  static CpuDevice device;
  return &device;
}

DeviceRegistry::DeviceRegistry() = default;

DeviceRegistry& DeviceRegistry::instance() {
  static DeviceRegistry registry;
  return registry;
}

void DeviceRegistry::add(std::unique_ptr<Device> device) { devices_.push_back(std::move(device)); }

Device* DeviceRegistry::find(std::string_view name) const {
  if (name == "cpu" || name == "cpu:0") return cpu_device();
  std::string wanted(name);
  if (wanted == "cuda") wanted = "cuda:0";
  for (const auto& d : devices_)
    if (d->name() == wanted) return d.get();
  return nullptr;
}

bool is_device_name(std::string_view name) {
  if (name == "cpu" || name == "cpu:0" || name == "cuda") return true;
  if (!name.starts_with("cuda:") || name.size() == 5) return false;
  for (char c : name.substr(5))
    if (c < '0' || c > '9') return false;
  return true;
}

}  // namespace tctl
