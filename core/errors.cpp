#include "core/errors.h"

#include <cstdio>
#include <cstdlib>

namespace tctl {

namespace {
std::string compose(const std::string& file, const std::string& where, const std::string& message) {
  std::string out;
  if (!file.empty()) out += file + ": ";
  if (!where.empty()) out += where + ": ";
  return out + message;
}
}  // namespace

SpecError::SpecError(std::string file, std::string where, const std::string& message)
    : Error(compose(file, where, message)), file_(std::move(file)), where_(std::move(where)), message_(message) {}

namespace {
// The length of the UTF-8 character starting at s[i], or 0 when the bytes there are not one.
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b = byte(i);
  const std::size_t n = b < 0x80 ? 1 : (b & 0xe0) == 0xc0 ? 2 : (b & 0xf0) == 0xe0 ? 3 : (b & 0xf8) == 0xf0 ? 4 : 0;
  if (n == 0 || i + n > s.size() || (n == 2 && b < 0xc2)) return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
  return n;
}
}  // namespace

std::string quote_for_message(std::string_view text) {
  constexpr std::size_t kLimit = 100;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  std::size_t i = 0;
  while (i < text.size() && i < kLimit) {
    const auto c = static_cast<unsigned char>(text[i]);
    const std::size_t n = utf8_length(text, i);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else if (n == 0) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      if (i + n > kLimit) break;  // a character the cut would split
      out.append(text.substr(i, n));
      i += n;
      continue;
    }
    ++i;
  }
  out += '"';
  if (i < text.size()) out += "...";
  return out;
}

bool has_control_character(std::string_view text) {
  for (const char c : text)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  return false;
}

void check_failed(const char* file, int line, const char* condition, const std::string& message) {
  std::fprintf(stderr, "tensorctl: internal check failed at %s:%d: %s (%s)\n", file, line, condition, message.c_str());
  std::abort();
}

}  // namespace tctl
