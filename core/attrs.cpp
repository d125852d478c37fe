#include "core/attrs.h"

#include "core/errors.h"

namespace tctl {

Attrs& Attrs::set(std::string name, AttrValue value) {
  for (auto& [n, v] : items_) {
    if (n == name) {
      v = std::move(value);
      return *this;
    }
  }
  items_.emplace_back(std::move(name), std::move(value));
  return *this;
}

const AttrValue* Attrs::find(std::string_view name) const {
  for (const auto& [n, v] : items_)
    if (n == name) return &v;
  return nullptr;
}

namespace {
template <class T>
const T& get(const AttrValue* v, std::string_view name) {
  TCTL_CHECK(v != nullptr, "missing attribute " + std::string(name));
  const T* p = std::get_if<T>(v);
  TCTL_CHECK(p != nullptr, "attribute " + std::string(name) + " has another type");
  return *p;
}
}  // namespace

std::int64_t Attrs::i(std::string_view name) const { return get<std::int64_t>(find(name), name); }
double Attrs::f(std::string_view name) const { return get<double>(find(name), name); }
const std::string& Attrs::s(std::string_view name) const { return get<std::string>(find(name), name); }
const std::vector<std::int64_t>& Attrs::ints(std::string_view name) const {
  return get<std::vector<std::int64_t>>(find(name), name);
}
std::int64_t Attrs::i_or(std::string_view name, std::int64_t fallback) const { return has(name) ? i(name) : fallback; }
double Attrs::f_or(std::string_view name, double fallback) const { return has(name) ? f(name) : fallback; }

}  // namespace tctl
