// Small text helpers for messages and flags.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tctl {

// "a, b, c": the items joined by ", ", as messages list the choices they expected.
inline std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// "a, b, c, d, e, f, g, h and 99992 more": at most `shown` of the items, then how many more, so a message
// about a list of 100,000 names stays one short line.
inline std::string join_first(const std::vector<std::string>& items, std::size_t shown = 8) {
  if (items.size() <= shown) return join(items);
  std::string out = join(std::vector<std::string>(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(shown)));
  return out + " and " + std::to_string(items.size() - shown) + " more";
}

// "a,,b" -> {"a", "", "b"}: a flag's comma list, empty items kept for the caller to refuse.
inline std::vector<std::string> split_at_commas(const std::string& text) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    out.push_back(text.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

}  // namespace tctl
