// The owner of a run directory: an advisory lock (flock) on its lock file (RunLayout::kLockFile), held for the
// whole of a command, so two writers never mix two runs in one directory and a reader never reads one run's
// model with another's weights. The kernel releases it when the process ends, however it ends. The lock file
// stays after the run (deleting it would race with a process about to lock it) and holds the pid of the last
// writer.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace tctl {

// Held from a successful acquire until destruction. Movable, not copyable. Not thread-safe: one per command.
class RunLock {
 public:
  enum class Mode {
    kWrite,  // train, train --resume: exclusive; creates the lock file and writes this process's pid into it
    kRead,   // predict, evaluate, export: shared with other readers; never writes, and a run directory without
             // a lock file (written before there was one, or read-only) is read without a lock
  };

  // Locks `dir`, which must exist. A writer refused by readers waits up to 10 s for them (they hold it only
  // while they read); otherwise nothing waits. When another process holds it in a way that excludes `mode`,
  // throws SpecError naming `dir`, who holds it (the writer's pid) and what to do. A file system without
  // flock support is read and written without a lock.
  static RunLock acquire(const std::filesystem::path& dir, Mode mode);

  RunLock() = default;
  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&& other) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  ~RunLock();

  // Releases the lock, and deletes the lock file when this lock created it: a command refused after it
  // locked a directory leaves it as it found it.
  void release_and_remove_if_created();

 private:
  int fd_ = -1;
  bool created_ = false;
  std::filesystem::path path_;
};

// Whether `name` is a temporary file write_file_atomic made for one of `names` (`<name>.tmp.<pid>.<counter>`)
// whose process no longer runs: left by a process that was killed while it wrote.
bool is_stale_temporary(const std::string& name, const std::vector<std::string>& names);

// Deletes the stale temporaries (is_stale_temporary) of `names` directly in `dir`. Call it only holding
// `dir`'s write lock. Returns how many were deleted; one that cannot be deleted is left.
int remove_stale_temporaries(const std::filesystem::path& dir, const std::vector<std::string>& names);

}  // namespace tctl
