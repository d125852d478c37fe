#include "core/device.h"

#include <cstdlib>
#include <cstring>

#include "core/errors.h"
#include "core/sim_device.h"

namespace tctl {

namespace {

class DoneEvent final : public Event {
 public:
  bool done() const override { return true; }
  void wait() override {}
};

// The host. Its "stream" is the calling thread: work and copies run before the call returns, and a freed
// block goes straight back to the system allocator.
class CpuDevice final : public Device {
 public:
  DeviceKind kind() const override { return DeviceKind::kCpu; }
  const std::string& name() const override { return name_; }
  bool host_addressable() const override { return true; }
  void* allocate(std::size_t bytes) override {
    // aligned_alloc wants a size that is a multiple of the alignment.
    std::size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (p == nullptr) throw RuntimeError("out of host memory allocating " + std::to_string(bytes) + " bytes");
    return p;
  }
  void deallocate(void* p, std::size_t) override { std::free(p); }
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override { copy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override { copy(dst, src, bytes); }
  void copy_on_device(void* dst, const void* src, std::size_t bytes) override { copy(dst, src, bytes); }
  void enqueue(std::function<void()> work) override { work(); }
  void synchronize() override {}
  std::shared_ptr<Event> record_event() override { return std::make_shared<DoneEvent>(); }

 private:
  static void copy(void* dst, const void* src, std::size_t bytes) {
    if (bytes != 0) std::memcpy(dst, src, bytes);
  }
  std::string name_ = "cpu";
};

// Digits after `prefix:`, or -1.
int index_after(std::string_view name, std::string_view prefix) {
  if (!name.starts_with(prefix) || name.size() <= prefix.size() || name[prefix.size()] != ':') return -1;
  std::string_view digits = name.substr(prefix.size() + 1);
  if (digits.empty() || digits.size() > 6) return -1;
  int n = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
    n = n * 10 + (c - '0');
  }
  return n;
}

}  // namespace

std::string_view device_kind_name(DeviceKind kind) {
  constexpr std::string_view kNames[kNumDeviceKinds] = {"cpu", "cuda", "sim"};
  return kNames[static_cast<std::size_t>(kind)];
}

Device* cpu_device() {
  static CpuDevice device;
  return &device;
}

DeviceRegistry::DeviceRegistry() {
  for (int i = 0; i < kSimDevices; ++i) devices_.push_back(std::make_unique<SimDevice>(i));
}

DeviceRegistry& DeviceRegistry::instance() {
  // Never destroyed: buffers held by other statics may give memory back to a device during exit.
  static DeviceRegistry* registry = new DeviceRegistry;
  return *registry;
}

void DeviceRegistry::add(std::unique_ptr<Device> device) { devices_.push_back(std::move(device)); }

Device* DeviceRegistry::find(std::string_view name) const {
  if (name == "cpu" || name == "cpu:0") return cpu_device();
  std::string wanted(name);
  if (wanted == "cuda" || wanted == "sim") wanted += ":0";
  for (const auto& d : devices_)
    if (d->name() == wanted) return d.get();
  return nullptr;
}

std::vector<std::string> DeviceRegistry::names() const {
  std::vector<std::string> out{"cpu"};
  for (const auto& d : devices_) out.push_back(d->name());
  return out;
}

bool is_device_name(std::string_view name) {
  if (name == "cpu" || name == "cpu:0" || name == "cuda" || name == "sim") return true;
  return index_after(name, "cuda") >= 0 || index_after(name, "sim") >= 0;
}

void copy_between(Device& from, const void* src, Device& to, void* dst, std::size_t bytes) {
  if (&from == &to) {
    from.copy_on_device(dst, src, bytes);
  } else if (from.kind() == DeviceKind::kCpu) {
    to.copy_from_host(dst, src, bytes);
  } else if (to.kind() == DeviceKind::kCpu) {
    from.copy_to_host(dst, src, bytes);
  } else {
    // Two devices with no direct path: through host memory.
    std::unique_ptr<char[]> staging(new char[bytes]);
    from.copy_to_host(staging.get(), src, bytes);
    to.copy_from_host(dst, staging.get(), bytes);
  }
}

}  // namespace tctl
