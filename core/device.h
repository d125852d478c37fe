// Devices: where a buffer lives and where a node's kernel runs. Every node carries a device name
// ("cpu", "cuda:0"); the placement pass resolves names to Device objects through the DeviceRegistry.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tctl {

enum class DeviceKind { kCpu, kCuda, kSim };
inline constexpr std::size_t kNumDeviceKinds = 3;
// "cpu", "cuda", "sim".
std::string_view device_kind_name(DeviceKind kind);

// A place memory lives and kernels run. Thread-safe: allocate/deallocate may be called from any thread.
class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceKind kind() const = 0;
  // Canonical name, e.g. "cpu" or "cuda:0".
  virtual const std::string& name() const = 0;
  // Returns memory aligned to 64 bytes; never null (throws RuntimeError when out of memory).
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* p, std::size_t bytes) = 0;
};

// The host CPU; one process-wide instance.
Device* cpu_device();

// Kinds spelled in specs: "cpu", "cuda", "cuda:N". Filled at start-up, read-only afterwards.
class DeviceRegistry {
 public:
  static DeviceRegistry& instance();
  void add(std::unique_ptr<Device> device);
  // The device with this name ("cuda" means "cuda:0"), or nullptr when absent.
  Device* find(std::string_view name) const;

 private:
  DeviceRegistry();
  std::vector<std::unique_ptr<Device>> devices_;
};

// True for names tensorctl knows how to spell ("cpu", "cuda", "cuda:N"), present or not.
bool is_device_name(std::string_view name);

}  // namespace tctl
