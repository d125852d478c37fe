#include "core/ops/window.h"

#include <algorithm>

#include "core/ceil_div.h"
#include "core/errors.h"

namespace tctl {

bool window_dim(std::int64_t in, std::int64_t window, std::int64_t stride, bool same, WindowDim& d) {
  d = WindowDim{in, window, stride, -1, 0};
  if (in < 0) return true;
  if (same) {
    d.out = ceil_div(in, stride);
    const std::int64_t total = std::max<std::int64_t>((d.out - 1) * stride + window - in, 0);
    d.pad_before = total / 2;
    return true;
  }
  if (window > in) return false;
  d.out = (in - window) / stride + 1;
  return true;
}

namespace {

bool is_same(const std::string& padding) { return padding == "same"; }

}  // namespace

WindowGeometry infer_window(const InferContext& c, const Shape& input, std::int64_t kh, std::int64_t kw,
                            const std::string& what) {
  const auto& strides = c.attrs().ints("strides");
  const std::string& padding = c.attrs().s("padding");
  if (padding != "valid" && padding != "same") c.fail("padding must be \"valid\" or \"same\", got \"" + padding + "\"");
  if (strides.size() != 2 || strides[0] <= 0 || strides[1] <= 0) c.fail("strides must be two positive integers");
  if (kh <= 0 || kw <= 0) c.fail(what + " size must be positive, got " + std::to_string(kh) + "x" + std::to_string(kw));
  WindowGeometry g;
  g.batch = input[0];
  g.channels = input[3];
  const bool same = is_same(padding);
  if (!window_dim(input[1], kh, strides[0], same, g.h) || !window_dim(input[2], kw, strides[1], same, g.w))
    c.fail(what + " " + std::to_string(kh) + "x" + std::to_string(kw) + " is larger than the input " +
           input.to_string() + " with \"valid\" padding");
  return g;
}

WindowGeometry window_geometry(const Attrs& attrs, const Shape& input, std::int64_t kh, std::int64_t kw) {
  const auto& strides = attrs.ints("strides");
  const bool same = is_same(attrs.s("padding"));
  WindowGeometry g;
  g.batch = input[0];
  g.channels = input[3];
  const bool fits = window_dim(input[1], kh, strides[0], same, g.h) && window_dim(input[2], kw, strides[1], same, g.w);
  TCTL_CHECK(fits, "window geometry not vetted by the shape function");
  return g;
}

}  // namespace tctl
