// Private helpers of the windowed layers (Conv1D/2D, MaxPooling1D/2D, AveragePooling1D/2D): reading Keras'
// "int or [h, w]" keys and "padding", the output size of a window over an input, TF's "valid" and "same", and
// a kernel in ONNX's layout. The 1-D layers run the 2-D ops on their [steps, 1, channels] reshape.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

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

// A 1-D window's size: a positive integer n or a list of one, [n], as Keras 3 writes it.
inline std::int64_t positive_int_single(SpecReader& spec, const std::string& key, std::int64_t fallback) {
  if (!spec.has(key)) {
    spec.skip(key);
    return fallback;
  }
  const nlohmann::json& v = spec.raw(key);
  const nlohmann::json& n = v.is_array() && v.size() == 1 ? v[0] : v;
  constexpr std::int64_t kMaxWindow = std::int64_t{1} << 16;  // as positive_int_pair's
  if (n.is_number_integer() && n.get<std::int64_t>() > 0 && n.get<std::int64_t>() <= kMaxWindow)
    return n.get<std::int64_t>();
  spec.fail(key, "expected a positive integer of at most 65536 or a list of one, " + describe_json(v));
}

// Output steps of a 1-D window over `steps` (see window_output); fails at `key` when a "valid" window is
// longer than the input.
inline std::int64_t window_output_1d(std::int64_t steps, std::int64_t window, std::int64_t stride,
                                     const std::string& padding, const SpecReader& where, const std::string& key) {
  if (padding == "same") return steps / stride + (steps % stride != 0);
  if (window > steps)
    where.fail(key, std::to_string(window) + " is longer than the input's " + std::to_string(steps) +
                        " steps with \"valid\" padding");
  return (steps - window) / stride + 1;
}

// A kernel in Keras' layout [kh, kw, in, out] as ONNX's Conv takes it, [out, in, kh, kw].
inline std::vector<float> onnx_conv_kernel(const std::vector<float>& hwio, std::int64_t kh, std::int64_t kw,
                                           std::int64_t in, std::int64_t out) {
  std::vector<float> oihw(hwio.size());
  for (std::int64_t i = 0; i < kh; ++i)
    for (std::int64_t j = 0; j < kw; ++j)
      for (std::int64_t c = 0; c < in; ++c)
        for (std::int64_t o = 0; o < out; ++o)
          oihw[static_cast<std::size_t>(((o * in + c) * kh + i) * kw + j)] =
              hwio[static_cast<std::size_t>(((i * kw + j) * in + c) * out + o)];
  return oihw;
}

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
