// csv_number: what the run's CSV files write for a number, %.6g, whole numbers by a path of their own.
#include "models/train/history_log.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace tctl {
namespace {

TEST_CASE("csv_number writes what %.6g writes, whole numbers and minus zero included") {
  const double inf = std::numeric_limits<double>::infinity();
  for (double v : {0.0,  -0.0,   1.0,      -1.0, 7.0,    255.0,      999999.0, -999999.0, 1e6, -1e6, 1234567.0,   0.5,
                   -2.5, 123.25, 999999.5, 1e-7, 3.0e-5, 16777217.0, 4.5e15,   -9.2e18,   inf, -inf, std::nan("")}) {
    CAPTURE(v);
    CHECK(csv_number(v) == fmt::format("{:.6g}", v));
    std::string appended = "x,";
    append_csv_number(appended, v);
    CHECK(appended == "x," + fmt::format("{:.6g}", v));
  }
}

}  // namespace
}  // namespace tctl
