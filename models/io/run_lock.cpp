#include "models/io/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstring>
#include <string_view>
#include <thread>
#include <utility>

#include "core/errors.h"
#include "models/io/run_layout.h"

namespace tctl {

namespace {

// The pid the lock file records (its last writer's), or 0 when it holds none.
long recorded_pid(int fd) {
  char text[32] = {};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  if (n <= 0) return 0;
  long pid = 0;
  const auto [end, ec] = std::from_chars(text, text + n, pid);
  return ec == std::errc() && pid > 0 ? pid : 0;
}

// Whether process `pid` exists: kill with signal 0 sends nothing. EPERM is another user's live process.
bool process_alive(long pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM); }

// Whether only readers hold the lock of `fd`: a shared lock can still be had.
bool only_readers(int fd) {
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0) return false;
  ::flock(fd, LOCK_UN);
  return true;
}

// How long a writer waits for readers to finish: they hold the lock only while they load the run's files.
constexpr auto kReaderWait = std::chrono::seconds(10);

// Who keeps `mode` from being had, for the refusal's message: a writer by its pid, or readers.
std::string holder_text(int fd, RunLock::Mode mode) {
  if (mode == RunLock::Mode::kWrite && only_readers(fd))
    return "other tensorctl processes (predict, evaluate or export) kept reading this run directory for 10 s; try "
           "again once they end";
  const long pid = recorded_pid(fd);
  const std::string who = pid > 0 && process_alive(pid) ? "another tensorctl process (pid " + std::to_string(pid) + ")"
                                                        : "another tensorctl process";
  return who + " is writing this run directory (" + RunLayout::kLockFile +
         " is locked); wait for it to end or stop it" +
         (mode == RunLock::Mode::kWrite ? ", or choose another --output" : "");
}

// "<name>.tmp.<pid>.<counter>" -> pid, or 0 when `entry` is no temporary of `name`.
long temporary_pid(std::string_view entry, const std::string& name) {
  const std::string prefix = name + ".tmp.";
  if (!entry.starts_with(prefix)) return 0;
  entry.remove_prefix(prefix.size());
  long pid = 0;
  const auto [end, ec] = std::from_chars(entry.data(), entry.data() + entry.size(), pid);
  if (ec != std::errc() || pid <= 0 || end == entry.data() + entry.size() || *end != '.') return 0;
  return pid;
}

}  // namespace

RunLock RunLock::acquire(const std::filesystem::path& dir, Mode mode) {
  const std::filesystem::path path = dir / RunLayout::kLockFile;
  const bool write = mode == Mode::kWrite;
  // A few tries: the file can be replaced between our open and our lock (a refused writer deletes the lock
  // file it created), and a lock on an unlinked file guards nothing.
  for (int attempt = 0; attempt < 64; ++attempt) {
    RunLock lock;
    lock.path_ = path;
    lock.fd_ = ::open(path.c_str(), (write ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
    if (lock.fd_ < 0 && errno == ENOENT) {
      if (!write) return RunLock();
      lock.fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0644);
      if (lock.fd_ < 0 && errno == EEXIST) continue;
      lock.created_ = lock.fd_ >= 0;
    }
    if (lock.fd_ < 0) {
      // A reader of a run it cannot lock (another user's, read-only) reads it as before there were locks.
      if (!write && (errno == EACCES || errno == EPERM)) return RunLock();
      throw SpecError(dir.string(), "",
                      std::string("cannot open the run directory's lock file ") + RunLayout::kLockFile + ": " +
                          std::strerror(errno));
    }
    // flock's errno, or 0 once locked.
    auto try_lock = [&](int operation) { return ::flock(lock.fd_, operation | LOCK_NB) == 0 ? 0 : errno; };
    int error = try_lock(write ? LOCK_EX : LOCK_SH);
    // A writer waits for readers, which hold the lock only while they read (a predict run as a train starts
    // is not a reason to refuse it); another writer, which holds it for a whole run, is refused at once.
    const auto until = std::chrono::steady_clock::now() + kReaderWait;
    while (error == EWOULDBLOCK && write && only_readers(lock.fd_) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      error = try_lock(LOCK_EX);
    }
    if (error != 0) {
      if (error == EWOULDBLOCK) {
        const std::string holder = holder_text(lock.fd_, mode);
        lock.created_ = false;  // the holder opened it: it is theirs now
        throw SpecError(dir.string(), "", holder);
      }
      // A file system without flock (some network mounts): no lock, as before there were locks.
      if (error == ENOLCK || error == EOPNOTSUPP || error == EINVAL) {
        lock.created_ = false;
        return lock;
      }
      throw RuntimeError("cannot lock " + path.string() + ": " + std::strerror(error));
    }
    struct stat locked {
    }, named{};
    if (::fstat(lock.fd_, &locked) != 0 || ::stat(path.c_str(), &named) != 0 || locked.st_ino != named.st_ino ||
        locked.st_dev != named.st_dev) {
      lock.created_ = false;
      continue;
    }
    if (write) {
      const std::string pid = std::to_string(::getpid()) + "\n";
      if (::ftruncate(lock.fd_, 0) != 0 || ::pwrite(lock.fd_, pid.data(), pid.size(), 0) < 0)
        throw RuntimeError("cannot write " + path.string() + ": " + std::strerror(errno));
    }
    return lock;
  }
  throw RuntimeError("cannot lock " + path.string() + ": it keeps being replaced");
}

RunLock::RunLock(RunLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      created_(std::exchange(other.created_, false)),
      path_(std::move(other.path_)) {}

RunLock& RunLock::operator=(RunLock&& other) noexcept {
  if (this == &other) return *this;
  if (fd_ >= 0) ::close(fd_);
  fd_ = std::exchange(other.fd_, -1);
  created_ = std::exchange(other.created_, false);
  path_ = std::move(other.path_);
  return *this;
}

RunLock::~RunLock() {
  // Closing the last descriptor of the file releases the lock. A lock file this object created stays when
  // it is destroyed this way: the run it guards was written.
  if (fd_ >= 0) ::close(fd_);
}

void RunLock::release_and_remove_if_created() {
  if (fd_ < 0) return;
  // Unlinked while still locked: a process that opened it meanwhile finds, once it locks, that the name now
  // leads elsewhere (or nowhere), and tries again.
  if (created_) ::unlink(path_.c_str());
  ::close(fd_);
  fd_ = -1;
  created_ = false;
}

bool is_stale_temporary(const std::string& name, const std::vector<std::string>& names) {
  for (const std::string& n : names)
    if (const long pid = temporary_pid(name, n); pid > 0)
      return pid != static_cast<long>(::getpid()) && !process_alive(pid);
  return false;
}

int remove_stale_temporaries(const std::filesystem::path& dir, const std::vector<std::string>& names) {
  std::error_code ec;
  std::vector<std::filesystem::path> stale;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.is_regular_file(ec) && !e.is_symlink(ec) && is_stale_temporary(e.path().filename().string(), names))
      stale.push_back(e.path());
  int removed = 0;
  for (const auto& p : stale) removed += std::filesystem::remove(p, ec) ? 1 : 0;
  return removed;
}

}  // namespace tctl
