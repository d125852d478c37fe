#include "core/locking_mode.h"

#include <array>
#include <utility>

namespace tctl {

namespace {
constexpr std::array<std::pair<LockingMode, std::string_view>, 6> kNames{{
    {LockingMode::kNone, "none"},
    {LockingMode::kMutex, "mutex"},
    {LockingMode::kProcess, "process"},
    {LockingMode::kAtomic, "atomic"},
    {LockingMode::kSnapshot, "snapshot"},
    {LockingMode::kDataflow, "dataflow"},
}};
}  // namespace

std::string_view locking_mode_name(LockingMode mode) {
  for (const auto& [m, name] : kNames)
    if (m == mode) return name;
  return "?";
}

std::optional<LockingMode> parse_locking_mode(std::string_view name) {
  for (const auto& [m, n] : kNames)
    if (n == name) return m;
  return std::nullopt;
}

std::vector<std::string_view> locking_mode_names() {
  std::vector<std::string_view> out;
  for (const auto& entry : kNames) out.push_back(entry.second);
  return out;
}

}  // namespace tctl
