#include "core/shape.h"

#include "core/errors.h"

namespace tctl {

Shape::Shape(std::initializer_list<std::int64_t> dims)
    : Shape(std::span<const std::int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const std::int64_t> dims) {
  TCTL_CHECK(dims.size() <= kMaxRank, "rank above Shape::kMaxRank");
  rank_ = static_cast<int>(dims.size());
  for (int i = 0; i < rank_; ++i) dims_[i] = dims[i];
}

std::int64_t Shape::num_elements() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

bool Shape::fully_known() const {
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] < 0) return false;
  return true;
}

Shape Shape::with_batch(std::int64_t batch) const {
  Shape s = *this;
  if (s.rank_ > 0) s.dims_[0] = batch;
  return s;
}

Shape Shape::without_batch() const {
  if (rank_ == 0) return *this;
  return Shape(dims().subspan(1));
}

MatrixDims matrix_dims(const Shape& s) {
  TCTL_CHECK(s.rank() >= 1, "matrix_dims of a scalar");
  MatrixDims m{1, s[s.rank() - 1]};
  for (int i = 0; i + 1 < s.rank(); ++i) m.rows = s[i] < 0 || m.rows < 0 ? -1 : m.rows * s[i];
  return m;
}

Shape Shape::concat(std::int64_t first, const Shape& rest) {
  TCTL_CHECK(rest.rank_ < kMaxRank, "rank above Shape::kMaxRank");
  Shape s;
  s.rank_ = rest.rank_ + 1;
  s.dims_[0] = first;
  for (int i = 0; i < rest.rank_; ++i) s.dims_[i + 1] = rest.dims_[i];
  return s;
}

bool Shape::compatible(const Shape& other) const {
  if (rank_ != other.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] >= 0 && other.dims_[i] >= 0 && dims_[i] != other.dims_[i]) return false;
  return true;
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ", ";
    s += dims_[i] < 0 ? std::string("?") : std::to_string(dims_[i]);
  }
  return s + "]";
}

std::string Shape::keras_string() const {
  std::string s = "(";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ", ";
    s += dims_[i] < 0 ? std::string("None") : std::to_string(dims_[i]);
  }
  if (rank_ == 1) s += ",";
  return s + ")";
}

}  // namespace tctl
