#include "core/read_whole.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>

#include "core/errors.h"

namespace tctl {
namespace {

// "a character device" or "a FIFO (a named pipe)", what may never end; null for anything else, and when
// fstat fails.
const char* endless_kind(std::FILE* file) {
  struct stat st {};
  if (::fstat(fileno(file), &st) != 0) return nullptr;
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISFIFO(st.st_mode)) return "a FIFO (a named pipe)";
  return nullptr;
}

}  // namespace

std::string read_whole(const std::filesystem::path& path, const std::string& file_for_errors, const ReadWhole& read) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rbe"), &std::fclose);
  if (!file) throw SpecError(file_for_errors, "", std::string("cannot open file: ") + std::strerror(errno));
  std::string kept;
  std::size_t total = 0;
  char chunk[1 << 16];
  try {
    for (;;) {
      const std::size_t n = std::fread(chunk, 1, sizeof chunk, file.get());
      // A short read is the end or an error (a directory fails here with EISDIR, as Linux opens one):
      // errno is the read's only until the next call.
      const int error = n < sizeof chunk && std::ferror(file.get()) ? errno : 0;
      if (n > 0) {
        const std::string_view got(chunk, n);
        read.inspect(got, kept);
        if (n > read.max_bytes - total) throw SpecError(file_for_errors, "", read.too_large(endless_kind(file.get())));
        total += n;
        if (read.keep) kept.append(got);
      }
      if (error != 0) throw SpecError(file_for_errors, "", std::string("cannot read file: ") + std::strerror(error));
      if (n < sizeof chunk) break;
    }
  } catch (const std::bad_alloc&) {
    throw RuntimeError(file_for_errors + ": too large to read into memory (" + std::to_string(total) + " bytes read)");
  }
  return kept;
}

std::string file_head(const std::filesystem::path& path, std::size_t bytes) {
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) return "";
  std::string head(bytes, '\0');
  head.resize(std::fread(head.data(), 1, bytes, file.get()));
  return head;
}

}  // namespace tctl
