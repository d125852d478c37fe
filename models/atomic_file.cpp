#include "models/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/errors.h"

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

}  // namespace

void write_file_atomic(const std::filesystem::path& path, std::string_view bytes) {
  std::filesystem::path temp = path;
  temp += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(g_temp_counter.fetch_add(1));

  // "x": fail rather than reuse a name some other writer is using; "e": do not leak the fd into children.
  std::FILE* file = std::fopen(temp.c_str(), "wbxe");
  if (file == nullptr) throw_io_error(path, "cannot create temporary file", errno);

  const char* failed = nullptr;
  int error = 0;
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), file) != bytes.size()) {
    failed = "write failed";
    error = errno;
  } else if (std::fflush(file) != 0) {
    failed = "flush failed";
    error = errno;
  } else if (::fsync(::fileno(file)) != 0) {
    failed = "fsync failed";
    error = errno;
  }
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

std::string read_file(const std::filesystem::path& path, const std::string& file_for_errors) {
  std::FILE* file = std::fopen(path.c_str(), "rbe");
  if (file == nullptr) throw SpecError(file_for_errors, "", std::string("cannot open file: ") + std::strerror(errno));

  // Read in chunks rather than trusting a size from stat: pipes and /proc files report none.
  std::string out;
  char chunk[1 << 16];
  std::size_t n;
  while ((n = std::fread(chunk, 1, sizeof chunk, file)) > 0) out.append(chunk, n);
  // A directory opens fine on Linux and fails here with EISDIR.
  int error = std::ferror(file) ? errno : 0;
  std::fclose(file);
  if (error != 0) throw SpecError(file_for_errors, "", std::string("cannot read file: ") + std::strerror(error));
  return out;
}

}  // namespace tctl
