#include "models/train/class_weights.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/errors.h"

namespace tctl {
namespace {

// Training rows per class: i32 labels, or for binary targets float 0/1 rounded.
std::vector<std::int64_t> rows_per_class(const Dataset& train, std::int64_t count) {
  std::vector<std::int64_t> rows(static_cast<std::size_t>(count), 0);
  const std::int64_t n = train.y.num_elements();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t k =
        train.y.dtype() == DType::kI32 ? train.y.data<std::int32_t>()[i] : std::llround(train.y.data<float>()[i]);
    if (k >= 0 && k < count) ++rows[static_cast<std::size_t>(k)];
  }
  return rows;
}

// The class a class_weight key names: an index below `count`, or one of the data's label names.
std::int64_t class_of(const TrainConfig& c, const Dataset& train, std::int64_t count, const std::string& key) {
  const auto named = std::find(train.class_names.begin(), train.class_names.end(), key);
  if (named != train.class_names.end()) return named - train.class_names.begin();
  if (!key.empty() && key.size() < 10 &&
      std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
    if (const std::int64_t k = std::stoll(key); k < count) return k;
  std::string known = fmt::format("0 to {}", count - 1);
  if (!train.class_names.empty()) known += fmt::format(" or a label name ({})", fmt::join(train.class_names, ", "));
  throw SpecError(c.file, "class_weight." + key,
                  fmt::format("the data has no class {}: its classes are {}", key, known));
}

}  // namespace

std::vector<float> resolve_class_weights(const TrainConfig& c, const Dataset& train, std::int64_t count) {
  std::vector<float> weights(static_cast<std::size_t>(count), 1.0f);
  if (c.class_weight.is_string()) {
    if (train.stream)
      throw SpecError(c.file, "class_weight",
                      "\"balanced\" counts the training rows of each class, which a streamed run does not hold; give "
                      "the weights as an object of classes and weights");
    const std::vector<std::int64_t> rows = rows_per_class(train, count);
    std::int64_t total = 0;
    for (const std::int64_t r : rows) total += r;
    for (std::size_t k = 0; k < rows.size(); ++k)
      if (rows[k] > 0)
        weights[k] = static_cast<float>(static_cast<double>(total) /
                                        (static_cast<double>(count) * static_cast<double>(rows[k])));
    return weights;
  }
  for (const auto& [key, value] : c.class_weight.items())
    weights[static_cast<std::size_t>(class_of(c, train, count, key))] = value.get<float>();
  return weights;
}

}  // namespace tctl
