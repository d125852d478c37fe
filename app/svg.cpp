#include "app/svg.h"

#include <cmath>

#include <fmt/format.h>

namespace tctl::app {

double tick_step(double span, int ticks) {
  const double raw = span / ticks;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * power) return m * power;
  return 10 * power;
}

std::string svg_escaped(const std::string& text) {
  std::string out;
  for (char ch : text) {
    if (ch == '&')
      out += "&amp;";
    else if (ch == '<')
      out += "&lt;";
    else if (ch == '>')
      out += "&gt;";
    else if (ch == '"')
      out += "&quot;";
    else
      out += ch;
  }
  return out;
}

std::string svg_open(double width, double height) {
  return fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" )"
                     R"(viewBox="0 0 {} {}" font-family="sans-serif">)"
                     "\n"
                     R"(<rect width="100%" height="100%" fill="white"/>)"
                     "\n",
                     width, height, width, height);
}

}  // namespace tctl::app
