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

constexpr char kHex[] = "0123456789abcdef";
void append_code_escape(std::string& out, std::uint32_t code) {
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(code >> shift) & 15];
}
void append_byte_escape(std::string& out, unsigned char c) {
  out += "\\x";
  out += kHex[c >> 4];
  out += kHex[c & 15];
}
// C1 controls (U+009B starts a terminal escape on some terminals) and the Unicode line separators.
bool is_unprintable_character(std::uint32_t code) {
  return (code >= 0x80 && code <= 0x9f) || code == 0x2028 || code == 0x2029;
}

// Appends `text` to `out` with its controls, C1 and line separators escaped and bytes that are not UTF-8 as
// \xNN, stopping before byte `limit` at a character boundary; returns where it stopped. `quoted`: quotes and
// backslashes are escaped too and line breaks and tabs written as \n and \t; otherwise they become spaces.
std::size_t append_escaped(std::string& out, std::string_view text, std::size_t limit, bool quoted) {
  std::size_t i = 0;
  while (i < text.size() && i < limit) {
    const auto c = static_cast<unsigned char>(text[i]);
    const auto [n, code] = utf8_at(text, i);
    if (n > 1) {
      if (i + n > limit) break;  // a character the cut would split
      if (is_unprintable_character(code))
        append_code_escape(out, code);
      else
        out.append(text.substr(i, n));
      i += n;
      continue;
    }
    if (!quoted && (c == '\n' || c == '\r' || c == '\t')) {
      out += ' ';
    } else if (quoted && (c == '"' || c == '\\')) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (quoted && c == '\n') {
      out += "\\n";
    } else if (quoted && c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      append_code_escape(out, c);
    } else if (n == 0) {
      append_byte_escape(out, c);
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  return i;
}
}  // namespace

std::optional<std::size_t> first_non_utf8(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_at(text, i).length;
    if (n == 0) return i;
    i += n;
  }
  return std::nullopt;
}

std::string quote_for_message(std::string_view text) {
  std::string out = "\"";
  const std::size_t end = append_escaped(out, text, 100, true);
  out += '"';
  if (end < text.size()) out += "...";
  return out;
}

std::string printable_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  append_escaped(out, text, text.size(), false);
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
