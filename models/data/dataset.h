// Data sets in memory: the built-in ones (digits, iris, spirals), CSV files, train/validation/test splits,
// row selection for batches, and feature standardisation.
//
// Everything here is deterministic: the same inputs and seed give the same bytes on every platform, because
// random numbers come from std::mt19937_64 (fully specified by the standard) through our own conversions,
// never through the implementation-defined std::*_distribution classes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/function_ref.h"
#include "core/tensor.h"

namespace tctl {

// Class labels are whole numbers below this (CSV and array files alike): the bound also stops a regression
// target mistaken for a label from sizing a huge one-hot layer.
inline constexpr int kMaxClasses = 100000;

class RowStream;

// A whole data set held as two tensors with one row per sample. Copying a Dataset shares the tensors'
// buffers (Tensors are immutable values), so copies are cheap and may be read from any thread.
struct Dataset {
  Tensor x;  // f32 [N, F] features.
  Tensor y;  // i32 [N] class labels in 0..num_classes-1 (classification), or f32 [N, T] targets (regression).
  int num_classes = 0;                     // 0 means regression.
  std::vector<std::string> feature_names;  // F names, the CSV column names for file data.
  std::string name;                        // "digits", "iris", "spirals", or the CSV file's stem.
  // The classes' names when the labels were written as names (label i is class_names[i]); empty when they were
  // the numbers 0..num_classes-1.
  std::vector<std::string> class_names;
  // Each row's text, when the features come from a CSV column of text (a config's "data": {"text": ...}):
  // x is then [N, 0] until the rows are vectorized (models/data/text_vectorizer.h), which needs the
  // training rows' vocabulary and so comes after the split. Empty for other data.
  std::vector<std::string> texts;
  // Each row's image file, when the rows come from a folder of images (models/data/images.h); else empty.
  std::vector<std::string> paths;
  // Each row's line in its CSV file, for messages, as loaded (load_csv_dataset): take_rows leaves them out.
  std::vector<std::int64_t> row_lines;

  // Set for a part of a data set too large to hold (a streamed run): its rows are in a file, read a window at
  // a time (models/data/row_stream.h), and x and y hold none of them (x is f32 [0, F]).
  std::shared_ptr<const RowStream> stream;

  // N, the number of samples (a stream's included); 0 for a default-constructed Dataset.
  std::int64_t size() const;
  // F, the number of features per sample; 0 for a default-constructed Dataset.
  std::int64_t num_features() const { return x.defined() ? x.shape()[1] : 0; }
  bool is_classification() const { return num_classes > 0; }
  // T, the targets per sample of a regression (y is [N, T]); 1 for classification.
  std::int64_t num_targets() const {
    return num_classes == 0 && y.defined() && y.shape().rank() == 2 ? y.shape()[1] : 1;
  }
};

// The columns that hold a row's targets in a run's CSVs (its test.csv, what evaluate reads): the label column
// itself for one target, else label_0, label_1, ... (a regression on [N, T] targets from arrays).
std::vector<std::string> target_columns(const std::string& label, std::int64_t targets);

// The names load_builtin knows, sorted: {"digits", "iris", "spirals"}.
std::vector<std::string> builtin_dataset_names();

// Loads a built-in data set by name, all classification:
//   "digits"  1797 x 64 pixel counts 0..16, 10 classes (configs/data/digits.csv)
//   "iris"    150 x 4 measurements in cm, 3 classes    (configs/data/iris.csv)
//   "spirals" 1000 x 2 points of two interleaved spirals, 2 classes, generated from `seed` (the other two
//             ignore it). Classes alternate row by row; coordinates lie within about [-1, 1].
// The CSV files are read from $TENSORCTL_DATA_DIR when set, else from the directory the models library was
// built with (the source tree's configs/data).
// Throws SpecError(file_for_errors, where, ...) for an unknown name, listing the known ones; `file_for_errors`
// and `where` say where the name was written (e.g. the train config and "dataset"). Throws RuntimeError when
// a built-in file is missing, and SpecError from read_csv when it is malformed.
Dataset load_builtin(const std::string& name, std::uint64_t seed, const std::string& file_for_errors,
                     const std::string& where);

// How load_csv_dataset reads a file and its labels.
struct CsvDataOptions {
  bool header = true;  // false: no header row, columns named "1", "2", ... (models/data/csv.h)
  // Labels may be names. Off for a trained run whose classes were numbers.
  bool named_labels = true;
  // A trained run's class names: each label must be one of them, and is its position. Empty: names (when
  // the labels are not all numbers) become the sorted distinct names in the file.
  std::vector<std::string> classes;
  // Not empty: the features are this column's text, kept in Dataset::texts, and every other column but the
  // label is ignored.
  std::string text_column;
  // Threads parsing the file (CsvOptions::threads); 0: one per core.
  int threads = 0;
};

// Loads a CSV file (see models/data/csv.h) as a data set: `label_column` is the target, every other column a
// feature, in file order; or, with options.text_column, that column's text (Dataset::texts) the only feature.
//   classification: labels that are all numbers must be integers in 0..99999 (SpecError naming `path` and the
//                   CSV line otherwise); y is i32 [N] and num_classes = largest label + 1. Labels that are names
//                   (any cell not a number, or options.classes given) give class_names: the sorted distinct
//                   names of the file's rows (byte order), or options.classes; y is each row's position there.
//   regression:     y is f32 [N, 1] and num_classes = 0.
// Throws SpecError(file_for_errors, where, ...) when there is no column called `label_column` (the message
// lists the columns) or no column is left for features; SpecError(path, "line N", ...) from read_csv, and for
// an empty label or a name that is not one of options.classes.
Dataset load_csv_dataset(const std::string& path, const std::string& label_column, bool classification,
                         const std::string& file_for_errors, const std::string& where,
                         const CsvDataOptions& options = {});

// Sets data.y, num_classes and class_names from column `label` of `table` as load_csv_dataset does (for
// classification the column must have been read as text). Throws SpecError naming `path` and the line.
struct CsvTable;
void set_labels(Dataset& data, const CsvTable& table, const std::string& path, int label, bool classification,
                const CsvDataOptions& options);
// A regression's targets, y [rows, columns.size()], from those columns of the table (set_labels' for one).
void set_targets(Dataset& data, const CsvTable& table, const std::string& path, const std::vector<int>& columns);

// The [rows, width] floats at `cells` without column `column`: each row's other cells packed to the front, in
// place, rows [rows, width - 1] after it. How a CSV's label column leaves its features without a copy.
void squeeze_out_column(float* cells, std::int64_t rows, std::int64_t width, std::int64_t column);

// A new Dataset holding the given rows of `data` (their texts too), in the order given (rows may repeat). Copies the
// data, so the result owns fresh buffers. Every index must lie in [0, data.size()) (checked, aborts otherwise). An
// empty `rows` gives a Dataset of N = 0 with the same feature count and metadata.
Dataset take_rows(const Dataset& data, std::span<const std::int64_t> rows);

// Rows of a [N, ...] tensor as a [rows, ...] batch in `buffer`, which is reused when this handle is its only
// owner and the shape fits (so steady-state training steps allocate nothing), else replaced. Returns it.
Tensor gather_rows(const Tensor& src, std::span<const std::int64_t> rows, Tensor& buffer);
// Int32 labels of those rows one-hot in a [rows, classes] float batch, reusing `buffer` the same way. A label
// outside [0, classes) gives a zero row.
Tensor one_hot_rows(const Tensor& labels, std::span<const std::int64_t> rows, std::int64_t classes, Tensor& buffer);

// The three parts of a data set; together they hold every row of the source exactly once.
struct Split {
  Dataset train, validation, test;
};

// Splits `data` into test, validation and train parts. The rows are put in order first: their file order, or
// a Fisher-Yates shuffle driven by std::mt19937_64(seed) when `shuffle` is set. The test part is the first
// round(N * test_split) rows of that order, validation the next round(M * validation_split) where M is the
// number of rows left, and train the rest; each part keeps that order. A fraction of 0 gives an empty part.
// Both fractions must lie in [0, 1) (checked: the config reader rejects other values with a SpecError that
// names the key). With tiny data sets the train part may come out empty; callers check size().
// A caller that moves in data whose features nobody else holds gives their buffer to the train part, its rows
// moved to the front in place (the test and validation rows are copied out first): no copy of the whole table.
// The order behind split_dataset: every row of N, shuffled or not, whose first `test` rows are the test part,
// the next `validation` the validation part and the rest the training part.
struct SplitOrder {
  std::vector<std::int64_t> order;
  std::int64_t test = 0, validation = 0;
};
SplitOrder split_order(std::int64_t n, double test_split, double validation_split, bool shuffle, std::uint64_t seed);
Split split_dataset(Dataset data, double test_split, double validation_split, bool shuffle, std::uint64_t seed);
// The same, in a given order (split_order's, or with_fold's).
Split split_dataset(Dataset data, const SplitOrder& order);

// `order` for cross-validation: its test part as it is, and the rows after it cut into `folds` folds, fold
// `fold` (1-based) the validation part and the others, in their order, the training part. Stratified when
// `labels` are class ids (i32 [N]): each class's rows, in order, go to folds 1, 2, ..., folds, 1, ... in turn,
// so every fold holds each class in proportion; otherwise the rows go round the folds in order.
SplitOrder with_fold(SplitOrder order, const Tensor& labels, std::int64_t folds, std::int64_t fold);

// What a resumed run checks of its data: the row count, and a 64-bit FNV-1a hash of the rows as loaded, before
// any split: the features' and labels' shapes and bytes (f32 and i32, little-endian as every platform we build
// for stores them), the class names and the rows' texts. The same data
// gives the same fingerprint on every run; a change to any value, row or class name changes the hash but
// for a 2^-64 chance.
// The feature columns' names, in order, have a hash of their own: they change no number the run trains on,
// but predict and evaluate find a run's features by name, so a run resumed on renamed or swapped columns
// would be fed its inputs in the wrong places. Checkpoints written before it record none (nullopt).
struct DataFingerprint {
  std::int64_t rows = 0;
  std::uint64_t hash = 0;
  std::optional<std::uint64_t> columns;
  bool operator==(const DataFingerprint&) const = default;
};
DataFingerprint fingerprint_of(const Dataset& data);
// The same hash from its parts, for data that is not in memory as a whole (a RowCache, models/data/row_cache.h):
// `bytes` feeds the features' bytes and then the labels' to the function it is given, in as many calls as it
// likes; `texts` feeds each row's text, in order (none for data without texts). A tensor that is not defined
// has no shape (nullopt).
struct FingerprintParts {
  std::int64_t rows = 0;
  std::optional<Shape> x_shape;
  DType x_dtype = DType::kF32;
  std::optional<Shape> y_shape;
  DType y_dtype = DType::kF32;
  int num_classes = 0;
  const std::vector<std::string>& class_names;
  const std::vector<std::string>& feature_names;
  FunctionRef<void(FunctionRef<void(const void*, std::size_t)> add)> bytes;
  FunctionRef<void(FunctionRef<void(std::string_view)> add)> texts;
};
DataFingerprint fingerprint_of_parts(const FingerprintParts& parts);

// Per-feature standardisation: x' = (x - mean) / std, with the mean and population standard deviation
// learned from the training rows only, so validation and test data are scaled the same way.
// A feature with (near) zero deviation, such as the always-blank border pixels of digits, gets std = 1 and so
// is only centred. Not thread-safe to fit; apply() is const and may run from many threads.
struct Standardizer {
  std::vector<float> mean;  // F means; empty until fit().
  std::vector<float> std;   // F deviations, all > 0.

  // Learns mean and std from x, f32 [N, F]. With N = 0 every mean is 0 and every std 1.
  void fit(const Tensor& x);
  // The same for rows that come a window at a time (a streamed data set, models/data/row_stream.h): `windows`
  // calls the function it is given with each window's rows, f32 [n, F], in order, once; the windows' means and
  // deviations are merged. Rows in one window give fit's bits; in more, the same to rounding.
  void fit_windows(std::int64_t features, FunctionRef<void(FunctionRef<void(const Tensor&)>)> windows);
  // x, f32 [N, F] with the fitted F (checked), with the learned scaling applied: in place when the caller
  // moved in the only handle of its buffer, else into a new tensor.
  Tensor apply(Tensor x) const;
};

}  // namespace tctl
