#include "models/nn/memory_budget.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>

#include <fmt/format.h>

#include "core/errors.h"

namespace tctl {

std::optional<std::int64_t> bounded_num_elements(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape.dims()) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return std::nullopt;
  }
  if (n > kMaxTensorElements) return std::nullopt;
  return n;
}

std::string approximate_num_elements(const Shape& shape) {
  double n = 1.0;
  for (std::int64_t d : shape.dims()) n *= static_cast<double>(d);
  return fmt::format("about {:.3g}", n);
}

namespace {

// The memory limit of this process's control group: cgroup v2's memory.max, or v1's memory.limit_in_bytes,
// of the group /proc/self/cgroup names; nullopt when there is none ("max", or v1's huge "unlimited").
std::optional<std::int64_t> cgroup_memory_limit() {
  std::ifstream groups("/proc/self/cgroup");
  std::string line;
  while (std::getline(groups, line)) {
    // "0::/path" (v2) or "4:memory:/path" (v1).
    const std::size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string group = line.substr(second + 1);
    const std::string file = controllers.empty()       ? "/sys/fs/cgroup" + group + "/memory.max"
                             : controllers == "memory" ? "/sys/fs/cgroup/memory" + group + "/memory.limit_in_bytes"
                                                       : "";
    if (file.empty()) continue;
    std::ifstream in(file);
    std::int64_t value = 0;
    if (in >> value && value > 0 && value < (std::int64_t{1} << 60)) return value;
  }
  return std::nullopt;
}

}  // namespace

std::int64_t memory_limit_bytes() {
  // Set but empty reads as unset, as TENSORCTL_DATA_DIR does. Anything else that is not a limit is refused:
  // "1.5G" or "1GB" used to fall back to the machine's memory without a word.
  if (const char* text = std::getenv("TENSORCTL_MEMORY_LIMIT"); text != nullptr && *text != '\0') {
    std::int64_t value = 0;
    const char* end = text + std::strlen(text);
    auto [rest, error] = std::from_chars(text, end, value);
    int shift = 0;
    if (error == std::errc() && rest + 1 == end) {
      const char* units = "KMGT";
      if (const char* u = std::strchr(units, std::toupper(static_cast<unsigned char>(*rest))); u != nullptr) {
        shift = 10 * static_cast<int>(u - units + 1);
        ++rest;
      }
    }
    if (error != std::errc() || rest != end || value <= 0 || value > (std::int64_t{1} << (62 - shift)))
      throw SpecError("", "TENSORCTL_MEMORY_LIMIT",
                      "expected a whole number of bytes from 1 to 2^62, or one with a K, M, G or T suffix (powers of "
                      "1024, either case: 512M, 8g), got " +
                          quote_for_message(text));
    return value << shift;
  }
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  std::int64_t limit = pages <= 0 || page <= 0 ? std::int64_t{1} << 62 : static_cast<std::int64_t>(pages) * page;
  // An address-space limit (`ulimit -v`) below the memory: allocations fail past it, so a model that needs
  // more is refused with the budget's message instead of failing in its first allocation.
  rlimit address_space{};
  if (::getrlimit(RLIMIT_AS, &address_space) == 0 && address_space.rlim_cur != RLIM_INFINITY &&
      address_space.rlim_cur < static_cast<rlim_t>(limit))
    limit = static_cast<std::int64_t>(address_space.rlim_cur);
  // A control group's limit (systemd-run -p MemoryMax=, a container's): past it the kernel kills the process.
  if (const std::optional<std::int64_t> group = cgroup_memory_limit(); group && *group < limit) limit = *group;
  return limit;
}

std::string byte_size_text(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB", "PB", "EB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 6) {
    bytes /= 1024.0;
    ++u;
  }
  return fmt::format("{:.2f} {}", bytes, units[u]);
}

}  // namespace tctl
