// Helpers shared by the training benchmarks: timing, medians, "1,2" lists, and the digits data set cut
// into fixed batches.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "models/data/dataset.h"

namespace tctl::bench {

inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

inline std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t comma = s.find(',', pos);
    out.push_back(std::stoi(s.substr(pos, comma - pos)));
    pos = comma == std::string::npos ? s.size() : comma + 1;
  }
  return out;
}

// The standardized digits in consecutive batches of `batch` rows (the last partial batch dropped), each
// input reshaped to (batch, *example_shape); labels as loaded.
struct Batches {
  std::vector<Tensor> xs, ys;
};
inline Batches digits_batches(std::int64_t batch, const Shape& example_shape) {
  Dataset digits = load_builtin("digits", 0, "", "");
  Standardizer st;
  st.fit(digits.x);
  const Tensor x_all = st.apply(digits.x);
  Batches out;
  for (std::int64_t start = 0; start + batch <= digits.size(); start += batch) {
    std::vector<std::int64_t> rows;
    for (std::int64_t i = start; i < start + batch; ++i) rows.push_back(i);
    Dataset b = take_rows(Dataset{x_all, digits.y, digits.num_classes, digits.feature_names, "digits"}, rows);
    out.xs.push_back(b.x.reshaped(Shape::concat(batch, example_shape)));
    out.ys.push_back(b.y);
  }
  return out;
}

}  // namespace tctl::bench
