#include "models/record/config_override.h"

#include <algorithm>
#include <array>
#include <string_view>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "core/errors.h"
#include "models/io/spec_reader.h"

namespace tctl {

namespace {

// A path's steps: an object key, or a list index.
using Step = std::variant<std::string, std::size_t>;

// The steps of `key`: "a.b[2].c" is a, b, 2, c. Empty when `key` is no path.
std::vector<Step> steps_of(std::string_view key) {
  std::vector<Step> out;
  std::size_t i = 0;
  while (i < key.size()) {
    const std::size_t end = key.find_first_of(".[", i);
    const std::string_view name = key.substr(i, end == std::string_view::npos ? key.size() - i : end - i);
    if (name.empty()) return {};
    out.emplace_back(std::string(name));
    i = end == std::string_view::npos ? key.size() : end;
    while (i < key.size() && key[i] == '[') {
      const std::size_t close = key.find(']', i);
      const std::string_view digits = key.substr(i + 1, close == std::string_view::npos ? 0 : close - i - 1);
      if (digits.empty() || digits.size() > 9 ||
          !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return {};
      out.emplace_back(static_cast<std::size_t>(std::stoul(std::string(digits))));
      i = close + 1;
    }
    if (i < key.size()) {
      if (key[i] != '.' || i + 1 == key.size()) return {};
      ++i;
    }
  }
  return out;
}

// The keys a model spec has at its top: an override of one of them changes the spec.
constexpr std::array<std::string_view, 3> kSpecKeys{"layers", "input_shape", "name"};

}  // namespace

ConfigOverride parse_override(const std::string& text) {
  const std::size_t eq = text.find('=');
  if (eq == std::string::npos)
    throw SpecError("", "--set", fmt::format("expected KEY=VALUE, got {}", quote_for_message(text)));
  ConfigOverride o{text.substr(0, eq), nullptr, text};
  if (steps_of(o.key).empty())
    throw SpecError("", "--set",
                    fmt::format("{} is no key path (keys and [index]es joined by dots: optimizer.learning_rate, "
                                "layers[1].units)",
                                quote_for_message(o.key)));
  const std::string value = text.substr(eq + 1);
  // JSON when it is JSON; else the text itself, so that a file name needs no quotes.
  o.value = nlohmann::json::parse(value, nullptr, false);
  if (o.value.is_discarded()) o.value = value;
  return o;
}

void apply_override(nlohmann::json& doc, const std::string& key, const nlohmann::json& value) {
  const std::vector<Step> steps = steps_of(key);
  TCTL_CHECK(!steps.empty(), "apply_override: a key parse_override refuses");
  nlohmann::json* at = &doc;
  std::string reached;  // the path so far, for messages
  for (const Step& step : steps) {
    if (const auto* name = std::get_if<std::string>(&step)) {
      if (at->is_null()) *at = nlohmann::json::object();
      if (!at->is_object())
        throw SpecError("--set " + key, "", fmt::format("{} is no object with keys: {}", reached, describe_json(*at)));
      at = &(*at)[*name];
      reached += (reached.empty() ? "" : ".") + *name;
    } else {
      const std::size_t index = std::get<std::size_t>(step);
      if (!at->is_array() || index >= at->size())
        throw SpecError("--set " + key, "",
                        at->is_array() ? fmt::format("{} has {} entries, so no [{}]", reached, at->size(), index)
                                       : fmt::format("{} is no list: {}", reached, describe_json(*at)));
      at = &(*at)[index];
      reached += "[" + std::to_string(index) + "]";
    }
  }
  *at = value;
}

TrainConfig load_train_config(const std::string& path, std::span<const ConfigOverride> overrides) {
  nlohmann::json doc = parse_json_file(path);
  // The spec's keys wait for the spec: a config may name it by its file.
  std::vector<std::pair<std::string, const ConfigOverride*>> spec;
  const bool spec_file = doc.is_object() && doc.contains("model") && doc["model"].is_string();
  for (const ConfigOverride& o : overrides) {
    const std::string first = o.key.substr(0, o.key.find_first_of(".["));
    if (std::find(kSpecKeys.begin(), kSpecKeys.end(), first) != kSpecKeys.end())
      spec.emplace_back(o.key, &o);
    else if (spec_file && o.key.starts_with("model."))
      spec.emplace_back(o.key.substr(6), &o);
    else if (doc.is_object())
      apply_override(doc, o.key, o.value);
  }
  TrainConfig c = TrainConfig::from_json(doc, path);
  for (const auto& [key, o] : spec) apply_override(c.model_spec, key, o->value);
  return c;
}

}  // namespace tctl
