#include "core/device.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

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
  std::shared_ptr<Event> record_event() override { return done_event(); }
  std::vector<std::pair<std::string, std::string>> properties() const override {
    return {{"processor", cpu_model()},
            {"cores", std::to_string(std::thread::hardware_concurrency())},
            {"simd", simd_supported()},
            {"built for", simd_built_for()}};
  }

 private:
  // The "model name" line of /proc/cpuinfo, or "unknown".
  static std::string cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);)
      if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos)
        return line.substr(line.find(':') + 2);
    return "unknown";
  }
  static std::string simd_supported() {
#if !defined(__x86_64__)
    return "n/a";
#else
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return "AVX-512";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "AVX2+FMA";
    if (__builtin_cpu_supports("avx")) return "AVX";
    return "SSE2";
#endif
  }
  // The widest vector instructions this binary was compiled to use (-march=native builds for the machine
  // that built it).
  static std::string simd_built_for() {
#if defined(__AVX512F__)
    return "AVX-512";
#elif defined(__AVX2__) && defined(__FMA__)
    return "AVX2+FMA";
#elif defined(__AVX__)
    return "AVX";
#else
    return "SSE2";
#endif
  }
  static void copy(void* dst, const void* src, std::size_t bytes) {
    if (bytes != 0) std::memcpy(dst, src, bytes);
  }
  std::string name_ = "cpu";
};

// Digits after `prefix:`, or -1. Only as find() and names() write them: "sim:01" would name sim:1 under
// another name, which placement, colocation and messages would take for another device.
int index_after(std::string_view name, std::string_view prefix) {
  if (!name.starts_with(prefix) || name.size() <= prefix.size() || name[prefix.size()] != ':') return -1;
  std::string_view digits = name.substr(prefix.size() + 1);
  if (digits.empty() || digits.size() > 6 || (digits.size() > 1 && digits.front() == '0')) return -1;
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

namespace {
std::atomic<bool> g_allow_tf32{false};
}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }

Device* cpu_device() {
  static CpuDevice device;
  return &device;
}

namespace {
std::vector<DeviceProvider>& providers() {
  static std::vector<DeviceProvider> list;
  return list;
}
std::atomic<bool> g_registry_made{false};
}  // namespace

bool add_device_provider(DeviceProvider provider) {
  TCTL_CHECK(!g_registry_made.load(), "a device provider registered after the device registry was made");
  providers().push_back(provider);
  return true;
}

std::shared_ptr<Event> done_event() {
  static const std::shared_ptr<Event> done = std::make_shared<DoneEvent>();
  return done;
}

DeviceRegistry::DeviceRegistry() {
  g_registry_made.store(true);
  for (int i = 0; i < kSimDevices; ++i) devices_.push_back(std::make_unique<SimDevice>(i));
  for (DeviceProvider provider : providers()) {
    ProvidedDevices provided = provider();
    backends_.push_back({provided.backend, provided.devices.empty() ? provided.why_none : ""});
    for (auto& d : provided.devices) devices_.push_back(std::move(d));
  }
}

DeviceRegistry& DeviceRegistry::instance() {
  // Never destroyed: buffers held by other statics may give memory back to a device during exit.
  static DeviceRegistry* registry = new DeviceRegistry;
  return *registry;
}

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

std::string DeviceRegistry::why_absent(std::string_view name) const {
  const std::string_view kind = name.substr(0, name.find(':'));
  std::string present;
  for (const auto& d : devices_)
    if (device_kind_name(d->kind()) == kind) present += (present.empty() ? "" : ", ") + d->name();
  if (!present.empty()) return "present: " + present;
  for (const Backend& b : backends_)
    if (b.name == kind) return b.why_none;
  return "this tensorctl was built without " + (kind == "cuda" ? std::string("CUDA") : std::string(kind));
}

bool is_device_name(std::string_view name) {
  if (name == "cpu" || name == "cpu:0" || name == "cuda" || name == "sim") return true;
  return index_after(name, "cuda") >= 0 || index_after(name, "sim") >= 0;
}

std::string device_name_error(std::string_view name) {
  if (is_device_name(name)) return "";
  if (name.empty()) return std::string("expected a device name (") + kDeviceSpellings + "), got an empty string";
  const std::size_t colon = name.find(':');
  const std::string_view kind = name.substr(0, colon);
  const std::string_view index = colon == std::string_view::npos ? "" : name.substr(colon + 1);
  constexpr std::string_view kDigits = "0123456789";
  const bool numeric = index.find_first_of(kDigits) != std::string_view::npos &&
                       index.find_first_not_of("0123456789+- \t") == std::string_view::npos;
  const bool plain = index.find_first_not_of(kDigits) == std::string_view::npos && !index.starts_with("0");
  if ((kind == "cpu" || kind == "cuda" || kind == "sim") && numeric && !plain)
    return "device " + quote_for_message(name) +
           ": an index is written as plain digits, without leading zeros, a sign or spaces (expected " +
           kDeviceSpellings + ")";
  return "unknown device " + quote_for_message(name) + " (expected " + kDeviceSpellings + ")";
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
