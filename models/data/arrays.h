// Arrays as data: NumPy's .npy files and the IDX files MNIST ships in, read into a Dataset's features and
// labels (a train config's "data": {"x": ..., "y": ...}).
//
//   .npy  NumPy's format, versions 1.0 to 3.0: the magic "\x93NUMPY", a header dict (descr, fortran_order,
//         shape) and the elements in C order; descr a little-endian (or one-byte) bool, integer or float
//         type: |b1, |i1, |u1, <i2, <u2, <i4, <u4, <i8, <u8, <f2, <f4, <f8.
//   .npz  NumPy's archive of arrays (np.savez, np.savez_compressed): a zip file of .npy members, read with
//         libzip; a config's x_key and y_key pick its arrays.
//   IDX   four bytes 0, 0, the type (0x08 ubyte, 0x09 byte, 0x0B short, 0x0C int, 0x0D float, 0x0E double)
//         and the number of dimensions, each dimension a big-endian 32-bit count, then the elements
//         big-endian in C order (train-images-idx3-ubyte, train-labels-idx1-ubyte).
//
// Which one a file is comes from its first bytes, not its name. A file is read through a read-only memory
// map and its elements converted to float32 as they are copied out; nothing past the elements its header
// declares may follow. Every refusal is a SpecError naming the file and the place (the header, or an
// element's index).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "models/data/dataset.h"
#include "models/data/row_cache.h"

namespace tctl {

struct ArrayFile {
  std::vector<std::int64_t> shape;  // empty for a scalar
  std::vector<float> values;        // every element, C order, as float32
  bool integral = false;            // the elements were bools or integers
  std::string type;                 // "uint8", "float64", ...: for messages
};

// Whether `head` (a file's first bytes, six or more when the file has them) begins as an array file does:
// .npy's magic, a zip archive's (.npz), or IDX's two zero bytes, which no CSV text holds.
bool looks_like_array_file(std::string_view head);

// The array held in `bytes` (a whole .npy, .npz or IDX file); `file` names it in errors. `key` picks the array
// of a .npz file (np.savez's keyword: "x_train"); empty, its only array. Only a .npz file takes a key.
ArrayFile decode_array(std::string_view bytes, const std::string& file, const std::string& key = "");

// The array in the file at `path` (see decode_array), read through a memory map.
ArrayFile load_array(const std::string& path, const std::string& key = "");

// An array file opened for its elements to be read a stretch at a time: the header read and checked as
// load_array checks it, the elements left in the file (read through a memory map: a .npy or IDX file is never
// held whole; a .npz member is uncompressed into memory). Reads may run on any thread.
class ArrayRows {
 public:
  explicit ArrayRows(const std::string& path, const std::string& key = "");
  ~ArrayRows();
  ArrayRows(const ArrayRows&) = delete;
  ArrayRows& operator=(const ArrayRows&) = delete;

  const std::vector<std::int64_t>& shape() const;
  // Elements [first, first + n) in C order, as float32, into `out`.
  void read_elements(std::int64_t first, std::int64_t n, float* out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A data set from two arrays with one row per sample: x [N, ...] (features, flattened to [N, F]; a [N]
// array is one feature) and y [N] or [N, 1] labels for classification (whole numbers in 0..99999, of any
// element type), or [N] or [N, T] targets for regression. Features and targets must be finite. The features
// are named "x0", "x1", ... (the columns of the run's test.csv, which predict and evaluate read).
// SpecError(file_for_errors, where, ...) when the two disagree on N, or from the files' own checks.
// `x_key` and `y_key` pick the arrays of .npz files (empty: a file's only array).
Dataset load_array_dataset(const std::string& x_path, const std::string& y_path, bool classification,
                           const std::string& file_for_errors, const std::string& where, const std::string& x_key = "",
                           const std::string& y_key = "");

// The same data set as a RowCache source, for a streamed run: x read 8 MiB at a time, checked as
// load_array_dataset checks it; y (small) read whole. Its identity is both files' and keys'.
RowCache::Source array_rows_source(const std::string& x_path, const std::string& y_path, bool classification,
                                   const std::string& file_for_errors, const std::string& where,
                                   const std::string& x_key = "", const std::string& y_key = "");

}  // namespace tctl
