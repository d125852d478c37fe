#include "core/errors.h"

#include <cstdint>
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
// The UTF-8 character starting at s[i]: its length and code point, or length 0 when the bytes there are not
// one (a stray continuation, a cut sequence, an overlong form, a surrogate, a code point past U+10FFFF).
struct Utf8 {
  std::size_t length;
  std::uint32_t code;
};
Utf8 utf8_at(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b = byte(i);
  if (b < 0x80) return {1, b};
  const std::size_t n = (b & 0xe0) == 0xc0 ? 2 : (b & 0xf0) == 0xe0 ? 3 : (b & 0xf8) == 0xf0 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return {0, 0};
  std::uint32_t code = b & (0xff >> (n + 1));
  for (std::size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return {0, 0};
    code = (code << 6) | (byte(i + k) & 0x3f);
  }
  static constexpr std::uint32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
  if (code < kSmallest[n] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return {0, 0};
  return {n, code};
}
}  // namespace

std::string quote_for_message(std::string_view text) {
  constexpr std::size_t kLimit = 100;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  std::size_t i = 0;
  while (i < text.size() && i < kLimit) {
    const auto c = static_cast<unsigned char>(text[i]);
    const auto [n, code] = utf8_at(text, i);
    // C1 controls (U+009B starts a terminal escape on some terminals) and the Unicode line separators.
    if (n > 1 && ((code >= 0x80 && code <= 0x9f) || code == 0x2028 || code == 0x2029)) {
      if (i + n > kLimit) break;
      out += "\\u";
      for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(code >> shift) & 15];
      i += n;
      continue;
    }
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
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) return true;
    // U+0080..U+009F, the C1 controls, are C2 80..C2 9F in UTF-8.
    if (c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) <= 0x9f &&
        static_cast<unsigned char>(text[i + 1]) >= 0x80)
      return true;
  }
  return false;
}

void check_failed(const char* file, int line, const char* condition, const std::string& message) {
  std::fprintf(stderr, "tensorctl: internal check failed at %s:%d: %s (%s)\n", file, line, condition, message.c_str());
  std::abort();
}

}  // namespace tctl
