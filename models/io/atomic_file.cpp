#include "models/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>

#include "core/errors.h"
#include "core/read_whole.h"

namespace tctl {

namespace {

std::atomic<unsigned long> g_temp_counter{0};

[[noreturn]] void throw_io_error(const std::filesystem::path& path, const char* what, int error) {
  throw RuntimeError("cannot write " + path.string() + ": " + what + ": " + std::strerror(error));
}

// Without this the rename may reach the disk before the directory entry does, and a power cut could lose
// the file although rename() returned. Some file systems refuse fsync on a directory; that is not an error.
void sync_directory(const std::filesystem::path& path) {
  std::filesystem::path dir = path.parent_path();
  if (dir.empty()) dir = ".";
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// "a directory", "a block device", "a socket", or nullptr for the kinds of file we write.
const char* unwritable_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return nullptr;
}

void write_all(int fd, std::string_view bytes, const std::filesystem::path& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_io_error(path, "write failed", errno);
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
}

// Opens the existing `path` for writing with `flags` besides O_WRONLY, writes what `produce` gives, with
// `sync` fsyncs, and closes it: what writing in place and appending share.
void write_through(const std::filesystem::path& path, int flags, FunctionRef<void(PieceWriter)> produce, bool sync) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY | flags);
  if (fd < 0) throw_io_error(path, "cannot open", errno);
  try {
    produce([&](std::string_view piece) { write_all(fd, piece, path); });
    if (sync && ::fsync(fd) != 0) throw_io_error(path, "fsync failed", errno);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0 && errno != EINTR) throw_io_error(path, "close failed", errno);
}

// A FIFO or a device is someone else's file: write into it as a shell redirection would, never replace it.
void write_in_place(const std::filesystem::path& path, FunctionRef<void(PieceWriter)> produce) {
  write_through(path, 0, produce, false);
}

// A reader that closed the pipe (`| head`) is no failure: the error stays flagged on stdout, and the program
// ends quietly once it has checked it (app/main.cpp's finish_stdout).
void write_stdout(std::string_view bytes) {
  if ((!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), stdout) != bytes.size()) ||
      std::fflush(stdout) != 0) {
    if (errno == EPIPE) return;
    throw RuntimeError(std::string("cannot write standard output: ") + std::strerror(errno));
  }
}

void replace_file(const std::filesystem::path& path, FunctionRef<void(PieceWriter)> produce) {
  std::filesystem::path temp = path;
  temp += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(g_temp_counter.fetch_add(1));

  // "x": fail rather than reuse a name some other writer is using; "e": do not leak the fd into children.
  std::FILE* file = std::fopen(temp.c_str(), "wbxe");
  if (file == nullptr) throw_io_error(path, "cannot create temporary file", errno);

  const char* failed = nullptr;
  int error = 0;
  try {
    produce([&](std::string_view piece) {
      if (failed == nullptr && !piece.empty() && std::fwrite(piece.data(), 1, piece.size(), file) != piece.size()) {
        failed = "write failed";
        error = errno;
      }
    });
  } catch (...) {
    std::fclose(file);
    std::remove(temp.c_str());
    throw;
  }
  auto check = [&](bool ok, const char* what) {
    if (failed != nullptr || ok) return;
    failed = what;
    error = errno;
  };
  check(std::fflush(file) == 0, "flush failed");
  check(::fsync(::fileno(file)) == 0, "fsync failed");
  // fclose can report a deferred write error (NFS, quotas), so its result counts too.
  if (std::fclose(file) != 0 && failed == nullptr) {
    failed = "close failed";
    error = errno;
  }
  if (failed == nullptr && std::rename(temp.c_str(), path.c_str()) != 0) {
    failed = "rename failed";
    error = errno;
  }
  if (failed != nullptr) {
    std::remove(temp.c_str());
    throw_io_error(path, failed, error);
  }
  sync_directory(path);
}

// The descriptor a path names as a shell does (/dev/stdout, /dev/fd/3, /proc/self/fd/2), or -1. Written
// through the descriptor we already hold: reopening it would start a file at offset 0, and replacing it would
// replace the caller's file or, as root, the system's /dev/stdout link.
int descriptor_path(const std::string& path) {
  if (path == "/dev/stdin" || path == "/dev/stdout") return path == "/dev/stdin" ? 0 : 1;
  if (path == "/dev/stderr") return 2;
  for (const char* prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    const std::size_t n = std::strlen(prefix);
    if (path.size() <= n || path.compare(0, n, prefix) != 0) continue;
    int fd = 0;
    auto [end, error] = std::from_chars(path.data() + n, path.data() + path.size(), fd);
    if (error == std::errc() && end == path.data() + path.size()) return fd;
  }
  return -1;
}

}  // namespace

void append_file(const std::filesystem::path& path, std::string_view bytes, bool sync) {
  write_through(
      path, O_APPEND, [&](PieceWriter write) { write(bytes); }, sync);
}

// The file a symbolic link chain ends at, whether or not that file exists yet: written in its place, so a
// link from a run directory into shared storage keeps pointing at the new contents.
std::filesystem::path final_target(const std::filesystem::path& path) {
  std::filesystem::path p = path;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    std::error_code ec;
    std::filesystem::path target = std::filesystem::read_symlink(p, ec);
    if (ec) return p;
    p = target.is_absolute() ? target : p.parent_path() / target;
  }
  throw RuntimeError("cannot write " + path.string() + ": " + std::strerror(ELOOP));
}

void write_file_atomic(const std::filesystem::path& path, std::string_view bytes) {
  write_file_atomic(path, [&](PieceWriter write) { write(bytes); });
}

void write_file_atomic(const std::filesystem::path& path, FunctionRef<void(PieceWriter)> produce) {
  if (path == "-") return produce([](std::string_view piece) { write_stdout(piece); });
  if (const int fd = descriptor_path(path.string()); fd >= 0) {
    if (fd == 1) return produce([](std::string_view piece) { write_stdout(piece); });
    std::fflush(stderr);
    return produce([&](std::string_view piece) { write_all(fd, piece, path); });
  }
  // stat() follows every link, the magic ones of /proc (/dev/stdout) included, to what is really there.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) return write_in_place(path, produce);
    if (const char* kind = unwritable_kind(st.st_mode))
      throw RuntimeError("cannot write " + path.string() + ": it is " + kind + ", not a file");
  }
  replace_file(final_target(path), produce);
}

void check_output_path(const std::string& path, const std::string& flag) {
  if (path == "-" || descriptor_path(path) >= 0) return;
  if (path.empty()) throw SpecError("", flag, "expected a file name or - for standard output, got an empty string");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (const char* kind = unwritable_kind(st.st_mode))
      throw SpecError("", flag, path + " is " + kind + "; expected a file, a FIFO, a character device or -");
    return;
  }
  if (errno != ENOENT) throw SpecError("", flag, "cannot write " + path + ": " + std::strerror(errno));
  const std::filesystem::path parent = final_target(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec))
    throw SpecError("", flag, "directory " + parent.string() + " does not exist");
}

std::string read_file(const std::filesystem::path& path, const std::string& file_for_errors, std::size_t max_bytes) {
  return read_whole(path, file_for_errors,
                    {.max_bytes = max_bytes,
                     .inspect = [](std::string_view, const std::string&) {},
                     // A device or a pipe such as /dev/zero never ends: say which it is.
                     .too_large =
                         [&](const char* kind) {
                           const std::string limit =
                               std::to_string(max_bytes >> 20) + " MiB, the most this file may hold";
                           return kind ? std::string(kind) + " that gave more than " + limit : "larger than " + limit;
                         }});
}

}  // namespace tctl
