#include "core/device.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>

#include <sys/mman.h>
#include <unistd.h>

#include "core/compute_type.h"
#include "core/errors.h"
#include "core/graph.h"

namespace tctl {

namespace {

// Blocks of 64 MiB and more (a data set's rows, an image folder decoded, a large embedding) ask the kernel
// for 2 MiB pages where it gives them on request (transparent huge pages in "madvise" mode; in "always" mode
// they have them anyway). Such a block is written whole before it is read, and on a virtual machine each
// 4 KiB page's first write is a fault of several microseconds: decoding 300 images into a new 180 MB tensor
// took 44,000 of them a pass, most of its time (bench/image_decode.sh; bench/README.md, "Huge pages for
// large blocks"). Not below 64 MiB: under a step's tensors (4-8 MiB) 2 MiB pages made the transformer
// step 11-14 % slower on the same machine, with fewer faults but more time computing; a step allocates
// nothing new from the system in its steady state anyway. TCTL_HUGE_PAGES=0 turns this off.
constexpr std::size_t kHugePageBlock = std::size_t{64} << 20;

bool huge_pages_wanted() {
  static const bool wanted = [] {
    const char* v = std::getenv("TCTL_HUGE_PAGES");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return wanted;
}

void advise_huge_pages(void* p, std::size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (!huge_pages_wanted()) return;
  // madvise takes whole pages: the block's pages that it holds entirely. The kernel backs each aligned 2 MiB
  // range inside them with one huge page; the ragged ends keep 4 KiB pages. An error (no THP) changes nothing.
  const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const std::uintptr_t begin = (reinterpret_cast<std::uintptr_t>(p) + page - 1) / page * page;
  const std::uintptr_t end = (reinterpret_cast<std::uintptr_t>(p) + bytes) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

class DoneEvent final : public Event {
 public:
  bool done() const override { return true; }
  void wait() override {}
};

// The host. Its "stream" is the calling thread: work and copies run before the call returns, and a freed
// block goes straight back to the system allocator.
class CpuDevice final : public Device {
 public:
  DeviceKind kind() const override { return DeviceKind::cpu(); }
  const std::string& name() const override { return name_; }
  bool host_addressable() const override { return true; }
  void* allocate(std::size_t bytes) override {
    // aligned_alloc wants a size that is a multiple of the alignment; a size that rounding would wrap is none
    // the system has.
    if (bytes > SIZE_MAX - 63) throw RuntimeError("out of host memory allocating " + std::to_string(bytes) + " bytes");
    std::size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (p == nullptr) throw RuntimeError("out of host memory allocating " + std::to_string(bytes) + " bytes");
    if (rounded >= kHugePageBlock) advise_huge_pages(p, rounded);
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
            {"built for", simd_built_for()},
            {"bf16 products", bf16_products()}};
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
  // Whether mixed_bfloat16's dense products run in bfloat16 here (kernels/cpu/bf16_product.h), and if not,
  // why: the same test as the run's precision line.
  static std::string bf16_products() {
    const std::string& absence = cpu_bf16_absence();
    return absence.empty() ? "yes" : "no (" + absence + ")";
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

namespace {

// The kinds' names by slot, the CPU's first. Filled by static registrars before main(), read-only after.
std::vector<std::string>& kind_names() {
  static std::vector<std::string> names{"cpu"};
  return names;
}
std::vector<BackendDef>& backend_defs() {
  static std::vector<BackendDef> defs;
  return defs;
}
std::atomic<bool> g_registry_made{false};

}  // namespace

DeviceKind device_kind(std::string_view name) {
  std::vector<std::string>& names = kind_names();
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return DeviceKind(i);
  TCTL_CHECK(!g_registry_made.load(), "device kind " + std::string(name) + " made after the device registry");
  TCTL_CHECK(names.size() < kMaxDeviceKinds, "more than kMaxDeviceKinds device kinds");
  names.emplace_back(name);
  return DeviceKind(names.size() - 1);
}

std::string_view DeviceKind::name() const { return kind_names()[slot_]; }

bool Device::supports(const Node& node) const { return node.op->kernel(kind()) != nullptr; }

std::string Device::collective_refusal(const Collective& /*collective*/) const {
  return name() + " has no all-reduce of its own";
}

std::atomic<bool>& backend_flag(std::string_view name) {
  static std::mutex mu;
  // A map's elements never move, so the references handed out stay valid.
  static std::map<std::string, std::atomic<bool>, std::less<>> flags;
  std::lock_guard lock(mu);
  auto it = flags.find(name);
  if (it == flags.end()) it = flags.try_emplace(std::string(name), false).first;
  return it->second;
}

Device* cpu_device() {
  static CpuDevice device;
  return &device;
}

bool register_backend(BackendDef def) {
  TCTL_CHECK(!g_registry_made.load(), "backend " + def.name + " registered after the device registry was made");
  TCTL_CHECK(def.name != "cpu" && !def.name.empty() && def.name.find(':') == std::string::npos,
             "bad backend name " + def.name);
  for (const BackendDef& b : backend_defs())
    TCTL_CHECK(b.name != def.name, "backend " + def.name + " registered twice");
  device_kind(def.name);
  // Kept in name order, so that listings and messages do not depend on the order static registrars ran in.
  std::vector<BackendDef>& defs = backend_defs();
  const auto at = std::find_if(defs.begin(), defs.end(), [&](const BackendDef& b) { return b.name > def.name; });
  defs.insert(at, std::move(def));
  return true;
}

std::shared_ptr<Event> done_event() {
  static const std::shared_ptr<Event> done = std::make_shared<DoneEvent>();
  return done;
}

DeviceRegistry::DeviceRegistry() {
  g_registry_made.store(true);
  for (const BackendDef& def : backend_defs()) {
    ProvidedDevices provided = def.provider != nullptr ? def.provider() : ProvidedDevices{{}, def.why_none};
    backends_.push_back({def.name, provided.devices.empty() ? provided.why_none : ""});
    for (auto& d : provided.devices) devices_.push_back(std::move(d));
  }
}

DeviceRegistry& DeviceRegistry::instance() {
  // Never destroyed: buffers held by other statics may give memory back to a device during exit.
  static DeviceRegistry* registry = new DeviceRegistry;
  return *registry;
}

Device* DeviceRegistry::find(std::string_view name) const {
  if (is_cpu_name(name)) return cpu_device();
  std::string wanted(name);
  if (wanted.find(':') == std::string::npos) wanted += ":0";
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
    if (d->kind().name() == kind) present += (present.empty() ? "" : ", ") + d->name();
  if (!present.empty()) return "present: " + present;
  for (const Backend& b : backends_)
    if (b.name == kind) return b.why_none;
  return "no backend is named " + std::string(kind);
}

const BackendDef* find_backend(std::string_view device_name) {
  const std::string_view kind = device_name.substr(0, device_name.find(':'));
  for (const BackendDef& b : backend_defs())
    if (b.name == kind) return &b;
  return nullptr;
}

std::string device_spellings() {
  std::vector<std::string> names;
  for (const BackendDef& b : backend_defs()) {
    names.push_back(b.name);
    names.push_back(b.name + ":N");
  }
  std::string out = "cpu";
  for (std::size_t i = 0; i < names.size(); ++i) out += (i + 1 == names.size() ? " or " : ", ") + names[i];
  return out;
}

bool is_cpu_name(std::string_view name) { return name == "cpu" || name == "cpu:0"; }

bool is_device_name(std::string_view name) {
  if (is_cpu_name(name)) return true;
  const BackendDef* backend = find_backend(name);
  return backend != nullptr && (name == backend->name || index_after(name, backend->name) >= 0);
}

std::string device_name_error(std::string_view name) {
  if (is_device_name(name)) return "";
  if (name.empty()) return "expected a device name (" + device_spellings() + "), got an empty string";
  const std::size_t colon = name.find(':');
  const std::string_view kind = name.substr(0, colon);
  const std::string_view index = colon == std::string_view::npos ? "" : name.substr(colon + 1);
  constexpr std::string_view kDigits = "0123456789";
  const bool numeric = index.find_first_of(kDigits) != std::string_view::npos &&
                       index.find_first_not_of("0123456789+- \t") == std::string_view::npos;
  const bool plain = index.find_first_not_of(kDigits) == std::string_view::npos && !index.starts_with("0");
  const bool known = kind == "cpu" || find_backend(kind) != nullptr;
  if (known && numeric && !plain)
    return "device " + quote_for_message(name) +
           ": an index is written as plain digits, without leading zeros, a sign or spaces (expected " +
           device_spellings() + ")";
  return "unknown device " + quote_for_message(name) + " (expected " + device_spellings() + ")";
}

void copy_between(Device& from, const void* src, Device& to, void* dst, std::size_t bytes) {
  if (&from == &to) {
    from.copy_on_device(dst, src, bytes);
  } else if (from.kind() == DeviceKind::cpu()) {
    to.copy_from_host(dst, src, bytes);
  } else if (to.kind() == DeviceKind::cpu()) {
    from.copy_to_host(dst, src, bytes);
  } else {
    // Two devices with no direct path: through host memory.
    std::unique_ptr<char[]> staging(new char[bytes]);
    from.copy_to_host(staging.get(), src, bytes);
    to.copy_from_host(dst, staging.get(), bytes);
  }
}

}  // namespace tctl
