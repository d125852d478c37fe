// Small text helpers for messages.
#pragma once

#include <string>
#include <vector>

namespace tctl {

// "a, b, c": the items joined by ", ", as messages list the choices they expected.
inline std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace tctl
