// Shape: the dimensions of a tensor, stored inline (no heap) so tensors copy cheaply on hot paths.
// A dimension of -1 is unknown (the batch dimension while a graph is traced); Keras prints it as None.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

namespace tctl {

class Shape {
 public:
  static constexpr int kMaxRank = 6;
  static constexpr std::int64_t kUnknown = -1;

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims);
  explicit Shape(std::span<const std::int64_t> dims);

  int rank() const { return rank_; }
  std::int64_t dim(int i) const { return dims_[i]; }
  std::int64_t operator[](int i) const { return dims_[i]; }
  void set_dim(int i, std::int64_t d) { dims_[i] = d; }
  std::span<const std::int64_t> dims() const { return {dims_.data(), static_cast<std::size_t>(rank_)}; }

  // Product of the dimensions; 1 for a scalar. Only meaningful when fully known.
  std::int64_t num_elements() const;
  bool fully_known() const;

  // This shape with dimension 0 replaced (the batch), and the same without dimension 0.
  Shape with_batch(std::int64_t batch) const;
  Shape without_batch() const;
  static Shape concat(std::int64_t first, const Shape& rest);

  // True when the shapes agree, treating an unknown dimension as matching anything.
  bool compatible(const Shape& other) const;

  // "[32, 64]" with "?" for unknown dimensions; keras_string gives "(None, 64)".
  std::string to_string() const;
  std::string keras_string() const;

  friend bool operator==(const Shape& a, const Shape& b) {
    if (a.rank_ != b.rank_) return false;
    for (int i = 0; i < a.rank_; ++i)
      if (a.dims_[i] != b.dims_[i]) return false;
    return true;
  }

 private:
  std::array<std::int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

// A shape of rank >= 1 seen as a matrix, as MatMul sees its operands: the last dimension's columns, and a
// row for each index of the dimensions before it ([N, T, F] is N T rows of F). rows is -1 when one of those
// dimensions is unknown.
struct MatrixDims {
  std::int64_t rows = 0, cols = 0;
};
MatrixDims matrix_dims(const Shape& s);

}  // namespace tctl
