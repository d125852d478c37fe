// Private helpers of the windowed layers (Conv2D, MaxPooling2D, AveragePooling2D): reading Keras' "int or
// [h, w]" keys and "padding", and the output size of a window over an input, TF's "valid" and "same".
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/attrs.h"
#include "core/shape.h"
#include "models/io/spec_reader.h"

namespace tctl::detail {

using Pair = std::array<std::int64_t, 2>;

// A positive integer n (read as [n, n]) or a list of two; `fallback` when the key is absent.
inline Pair positive_int_pair(SpecReader& spec, const std::string& key, Pair fallback) {
  if (!spec.has(key)) {
    spec.skip(key);
    return fallback;
  }
  const nlohmann::json& v = spec.raw(key);
  // A window or stride past 2^16 is a typo; capping it keeps "same" padding from looping over absurd windows.
  constexpr std::int64_t kMaxWindow = std::int64_t{1} << 16;
  auto positive = [](const nlohmann::json& x) {
    return x.is_number_integer() && x.get<std::int64_t>() > 0 && x.get<std::int64_t>() <= kMaxWindow;
  };
  if (positive(v)) return {v.get<std::int64_t>(), v.get<std::int64_t>()};
  if (v.is_array() && v.size() == 2 && positive(v[0]) && positive(v[1]))
    return {v[0].get<std::int64_t>(), v[1].get<std::int64_t>()};
  spec.fail(key, "expected a positive integer of at most 65536 or a list of two, " + describe_json(v));
}

inline std::string read_padding(SpecReader& spec) { return spec.one_of("padding", {"valid", "same"}, "valid"); }

inline nlohmann::json pair_json(const Pair& p) { return nlohmann::json::array({p[0], p[1]}); }

// ONNX's auto_pad for a padding: TF's "same" puts the odd pixel after, as SAME_UPPER does.
inline std::string onnx_auto_pad(const std::string& padding) { return padding == "same" ? "SAME_UPPER" : "VALID"; }

// The [H, W, C] input of a windowed layer; anything else fails at the layer.
inline void expect_image_input(const Shape& input, const std::string& type, const SpecReader& where) {
  if (input.rank() != 3)
    where.fail_here(type + " expects an input of shape (None, height, width, channels), got " +
                    Shape::concat(-1, input).keras_string());
}

// Output (height, width) of a window over an (height, width) input: ceil(in / stride) for "same",
// (in - window) / stride + 1 for "valid". Fails at `key` when a "valid" window is larger than the input.
inline Pair window_output(const Shape& input, const Pair& window, const Pair& strides, const std::string& padding,
                          const SpecReader& where, const std::string& key) {
  Pair out{};
  for (int i = 0; i < 2; ++i) {
    if (padding == "same") {
      out[i] = input[i] / strides[i] + (input[i] % strides[i] != 0);
      continue;
    }
    if (window[i] > input[i])
      where.fail(key, std::to_string(window[0]) + "x" + std::to_string(window[1]) + " is larger than the input " +
                          Shape::concat(-1, input).keras_string() + " with \"valid\" padding");
    out[i] = (input[i] - window[i]) / strides[i] + 1;
  }
  return out;
}

inline Attrs window_attrs(const Pair& strides, const std::string& padding) {
  return Attrs{{"strides", std::vector<std::int64_t>{strides[0], strides[1]}}, {"padding", padding}};
}

}  // namespace tctl::detail
