// Private helper of the normalization layers (BatchNormalization, LayerNormalization), which normalize over
// the last axis only: their "axis" key, read when the layer is made and checked against its input in build.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/shape.h"
#include "models/io/spec_reader.h"

namespace tctl::detail {

// -1 when absent; an integer otherwise, or with `list_of_one` also a list of one ([-1], as Keras 3 writes
// LayerNormalization's). Anything else fails at "axis".
inline nlohmann::json read_last_axis(SpecReader& spec, bool list_of_one) {
  if (!spec.has("axis")) return -1;
  nlohmann::json axis = spec.raw("axis");
  if (list_of_one && axis.is_array() && axis.size() == 1) axis = axis[0];
  if (!fits_int64(axis)) spec.fail("axis", "expected -1 (the last axis), " + describe_json(axis));
  return axis;
}

// Only the last axis is supported; its positive index (counting the batch) names the same axis.
inline void check_last_axis(const nlohmann::json& axis_json, const Shape& input, const SpecReader& where) {
  const std::int64_t axis = axis_json.get<std::int64_t>();
  if (axis != -1 && axis != input.rank())
    where.fail("axis", "only the last axis (-1) is supported, got " + std::to_string(axis) + " for input " +
                           Shape::concat(-1, input).keras_string());
}

}  // namespace tctl::detail
