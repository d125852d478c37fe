// Attrs: the named, typed attributes of a graph node (transpose flags, rates, seeds, axes).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace tctl {

using AttrValue = std::variant<std::int64_t, double, std::string, std::vector<std::int64_t>>;

// A small ordered list of attributes; node attribute sets are tiny, so a vector beats a map.
class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<std::string, AttrValue>> items) : items_(items) {}

  Attrs& set(std::string name, AttrValue value);
  bool has(std::string_view name) const { return find(name) != nullptr; }

  // Typed getters; a missing attribute or a wrong type is an internal error (TCTL_CHECK), since ops set
  // their own attributes. The `_or` forms give a default instead.
  std::int64_t i(std::string_view name) const;
  double f(std::string_view name) const;
  const std::string& s(std::string_view name) const;
  const std::vector<std::int64_t>& ints(std::string_view name) const;
  std::int64_t i_or(std::string_view name, std::int64_t fallback) const;
  double f_or(std::string_view name, double fallback) const;

  const std::vector<std::pair<std::string, AttrValue>>& items() const { return items_; }

 private:
  const AttrValue* find(std::string_view name) const;
  std::vector<std::pair<std::string, AttrValue>> items_;
};

}  // namespace tctl
