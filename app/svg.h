// What the commands that draw SVG (plot, lr-find) share: round axis steps, escaped text, the document's
// frame and a panel's tick labels.
#pragma once

#include <cmath>
#include <string>

#include <fmt/format.h>

namespace tctl::app {

// A round step for about `ticks` ticks over `span`: 1, 2 or 5 times a power of ten.
double tick_step(double span, int ticks);

// Text escaped for an SVG attribute or element.
std::string svg_escaped(const std::string& text);

// The opening of an SVG document `width` x `height` on a white background; close it with "</svg>\n".
std::string svg_open(double width, double height);

// Horizontal grid lines labelled with their values, every round step from lo to hi, for a panel spanning x0
// to x1 whose values map to heights by `y_of` (lo at its bottom).
template <class YOf>
std::string value_ticks(double lo, double hi, double x0, double x1, YOf y_of) {
  std::string out;
  const double step = tick_step(hi - lo, 5);
  for (double v = std::ceil(lo / step) * step; v <= hi; v += step) {
    if (std::abs(v) < step * 1e-9) v = 0;  // not "-0"
    out += fmt::format(R"(<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" stroke="#eee"/><text x="{}" y="{:.1f}" )"
                       R"(font-size="11" text-anchor="end">{:.4g}</text>)"
                       "\n",
                       x0, y_of(v), x1, y_of(v), x0 - 6, y_of(v) + 4, v);
  }
  return out;
}

}  // namespace tctl::app
