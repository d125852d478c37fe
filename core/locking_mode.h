// LockingMode: how reads and updates of one Variable meet when threads share it (DESIGN.md, concurrency model).
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace tctl {

enum class LockingMode {
  kNone,      // unsynchronized read-modify-write, loses updates (TensorFlow use_locking=false, Hogwild)
  kMutex,     // one lock per variable for the whole update (use_locking=true); the default
  kProcess,   // one process-wide lock shared by every variable
  kAtomic,    // lock-free per-element compare-and-swap; no lost update, reads may tear
  kSnapshot,  // copy-on-write versions: readers get immutable snapshots
  kDataflow,  // no lock; the graph orders the updates
};

// JSON / flag spelling: "none", "mutex", "process", "atomic", "snapshot", "dataflow".
std::string_view locking_mode_name(LockingMode mode);
std::optional<LockingMode> parse_locking_mode(std::string_view name);
std::vector<std::string_view> locking_mode_names();

}  // namespace tctl
