#include "models/io/event_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/errors.h"
#include "models/io/run_layout.h"

namespace tctl {

namespace {

constexpr std::array<std::uint32_t, 256> make_crc_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<std::uint32_t, 256> kCrcTable = make_crc_table();

void put_fixed(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}

void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

// Field `number` of wire type `type` (0 varint, 1 64-bit, 2 length-delimited, 5 32-bit).
void put_tag(std::string& out, int number, int type) {
  put_varint(out, static_cast<std::uint64_t>(number << 3 | type));
}

void put_bytes(std::string& out, int number, std::string_view bytes) {
  put_tag(out, number, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

void put_double(std::string& out, int number, double v) {
  put_tag(out, number, 1);
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  put_fixed(out, bits, 8);
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

std::uint32_t crc32c(std::string_view data) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = kCrcTable[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::uint32_t masked_crc32c(std::string_view data) {
  const std::uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

std::string tf_record(std::string_view data) {
  std::string length;
  put_fixed(length, data.size(), 8);
  std::string out = length;
  put_fixed(out, masked_crc32c(length), 4);
  out.append(data);
  put_fixed(out, masked_crc32c(data), 4);
  return out;
}

std::string event_file_version(double wall_time) {
  std::string out;
  put_double(out, 1, wall_time);
  put_bytes(out, 3, "brain.Event:2");
  return out;
}

std::string event_scalars(double wall_time, std::int64_t step,
                          const std::vector<std::pair<std::string, float>>& values) {
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    put_bytes(value, 1, tag);
    put_tag(value, 2, 5);
    std::uint32_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    put_fixed(value, bits, 4);
    put_bytes(summary, 1, value);
  }
  std::string out;
  put_double(out, 1, wall_time);
  put_tag(out, 2, 0);
  put_varint(out, static_cast<std::uint64_t>(step));
  put_bytes(out, 5, summary);
  return out;
}

EventFileWriter::EventFileWriter(const std::filesystem::path& dir) {
  static std::atomic<int> counter{0};
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw RuntimeError("cannot create " + dir.string() + ": " + ec.message());
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  path_ = dir / (RunLayout::kEventFilePrefix + std::to_string(static_cast<std::int64_t>(now)) + "." + host_name() +
                 "." + std::to_string(getpid()) + "." + std::to_string(counter++) + ".tensorctl");
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw RuntimeError("cannot create " + path_.string() + ": " + std::strerror(errno));
  append({event_file_version(now)});
}

EventFileWriter::~EventFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void EventFileWriter::append(const std::vector<std::string>& events) {
  std::string bytes;
  for (const auto& e : events) bytes += tf_record(e);
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw RuntimeError("cannot write " + path_.string() + ": " + std::strerror(errno));
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace tctl
