#include "models/data/dataset.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numbers>
#include <random>
#include <unordered_map>

#include "core/errors.h"
#include "core/fnv.h"
#include "core/random.h"
#include "core/text.h"
#include "models/data/csv.h"
#include "models/data/row_stream.h"

#ifndef TENSORCTL_DATA_DIR
#define TENSORCTL_DATA_DIR "configs/data"
#endif

namespace tctl {

namespace {

// Shortest text that reads back as v ("1.5", not std::to_string's "1.500000").
std::string format_float(float v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}

// One normal per call. 1 - u keeps the log argument in (0, 1].
double standard_normal(std::mt19937_64& rng) {
  const double u1 = 1.0 - uniform01(rng);
  return box_muller(u1, uniform01(rng));
}

// Uniform integer in [0, bound) by rejection: drawing from the largest multiple of `bound` keeps it unbiased,
// and the arithmetic is the same on every platform (std::uniform_int_distribution's is not).
std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t bound) {
  const std::uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
  while (true) {
    std::uint64_t r = rng();
    if (r >= threshold) return r % bound;
  }
}

std::string data_dir() {
  if (const char* env = std::getenv("TENSORCTL_DATA_DIR"); env != nullptr && *env != '\0') return env;
  return TENSORCTL_DATA_DIR;
}

// Class labels as numbers: integers in 0..kMaxClasses-1.
void numeric_labels(const CsvTable& table, const std::string& path, int label, Dataset& data) {
  auto* y = data.y.mutable_data<std::int32_t>();
  std::int32_t largest = 0;
  for (std::int64_t r = 0; r < table.rows; ++r) {
    const float v = table.at(r, label);
    // The upper bound also stops a regression target mistaken for a label from sizing a huge one-hot layer.
    if (!(v >= 0.0f && v < static_cast<float>(kMaxClasses) && v == std::floor(v)))
      throw SpecError(path, "line " + std::to_string(table.row_lines[static_cast<std::size_t>(r)]),
                      "column " + quote_for_message(table.columns[static_cast<std::size_t>(label)]) +
                          ": class labels must be integers in 0.." + std::to_string(kMaxClasses - 1) + ", got " +
                          (std::isnan(v) ? quote_for_message(table.text_at(r, label)) : format_float(v)));
    y[r] = static_cast<std::int32_t>(v);
    largest = std::max(largest, y[r]);
  }
  data.num_classes = largest + 1;
}

// Class labels as names: the given classes, or the sorted distinct names of the rows.
void named_labels(const CsvTable& table, const std::string& path, int label, const std::vector<std::string>& known,
                  Dataset& data) {
  const std::string& column = table.columns[static_cast<std::size_t>(label)];
  auto where = [&](std::int64_t r) { return "line " + std::to_string(table.row_lines[static_cast<std::size_t>(r)]); };
  for (std::int64_t r = 0; r < table.rows; ++r) {
    if (table.text_at(r, label).empty())
      throw SpecError(path, where(r), "column " + quote_for_message(column) + ": empty class label");
    if (const auto bad = first_non_utf8(table.text_at(r, label)))
      throw SpecError(
          path, where(r),
          not_utf8_message("column " + quote_for_message(column) + ": class name", table.text_at(r, label), *bad));
  }
  std::vector<std::string> names = known;
  if (names.empty()) {
    names = table.text[static_cast<std::size_t>(label)];
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    if (names.size() > static_cast<std::size_t>(kMaxClasses))
      throw SpecError(path, where(0),
                      "column " + quote_for_message(column) + " holds " + std::to_string(names.size()) +
                          " distinct class names; at most " + std::to_string(kMaxClasses) + " are allowed");
  }
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::int32_t> position(names.size());
  for (std::size_t i = 0; i < names.size(); ++i)
    position[static_cast<std::size_t>(std::lower_bound(sorted.begin(), sorted.end(), names[i]) - sorted.begin())] =
        static_cast<std::int32_t>(i);
  auto* y = data.y.mutable_data<std::int32_t>();
  for (std::int64_t r = 0; r < table.rows; ++r) {
    const std::string& name = table.text_at(r, label);
    auto it = std::lower_bound(sorted.begin(), sorted.end(), name);
    if (it == sorted.end() || *it != name)
      throw SpecError(path, where(r),
                      "column " + quote_for_message(column) + ": " + quote_for_message(name) +
                          " is not one of the run's " + std::to_string(names.size()) + " classes (" +
                          join_first(names) + ")");
    y[r] = position[static_cast<std::size_t>(it - sorted.begin())];
  }
  data.num_classes = static_cast<int>(names.size());
  data.class_names = std::move(names);
}

}  // namespace

std::vector<std::string> target_columns(const std::string& label, std::int64_t targets) {
  if (targets == 1) return {label};
  std::vector<std::string> names;
  for (std::int64_t j = 0; j < targets; ++j) names.push_back(label + "_" + std::to_string(j));
  return names;
}

void set_targets(Dataset& data, const CsvTable& table, const std::string& path, const std::vector<int>& columns) {
  const std::int64_t n = table.rows, t = static_cast<std::int64_t>(columns.size());
  data.num_classes = 0;
  data.class_names.clear();
  data.y = Tensor::empty(DType::kF32, Shape{n, t});
  float* y = data.y.mutable_data<float>();
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t j = 0; j < t; ++j) {
      const int c = columns[static_cast<std::size_t>(j)];
      y[r * t + j] = table.at(r, c);
      // Only a column read as text holds NaN.
      if (std::isnan(y[r * t + j]))
        throw SpecError(path, "line " + std::to_string(table.row_lines[static_cast<std::size_t>(r)]),
                        "column " + quote_for_message(table.columns[static_cast<std::size_t>(c)]) +
                            ": expected a finite number, got " + quote_for_message(table.text_at(r, c)));
    }
}

void set_labels(Dataset& data, const CsvTable& table, const std::string& path, int label, bool classification,
                const CsvDataOptions& options) {
  const std::int64_t n = table.rows;
  if (!classification) return set_targets(data, table, path, {label});
  data.y = Tensor::empty(DType::kI32, Shape{n});
  bool all_numbers = true;
  for (std::int64_t r = 0; r < n && all_numbers; ++r) all_numbers = !std::isnan(table.at(r, label));
  if (options.named_labels && (!options.classes.empty() || !all_numbers)) {
    named_labels(table, path, label, options.classes, data);
  } else {
    data.class_names.clear();
    numeric_labels(table, path, label, data);
  }
}

namespace {

// The table's rows as features and labels. Its values become the features in place, the label column
// squeezed out of each row (every cell moves left, or stays): no second copy of the table
// (bench/csv_load.sh).
Dataset dataset_from_table(CsvTable table, const std::string& path, int label, bool classification,
                           const CsvDataOptions& options = {}) {
  const std::int64_t n = table.rows;
  const auto width = static_cast<int>(table.columns.size());
  const std::int64_t features = width - 1;

  Dataset data;
  data.name = std::filesystem::path(path).stem().string();
  for (int c = 0; c < width; ++c)
    if (c != label) data.feature_names.push_back(table.columns[static_cast<std::size_t>(c)]);
  set_labels(data, table, path, label, classification, options);
  data.row_lines = std::move(table.row_lines);

  Tensor values = std::move(table.values);
  squeeze_out_column(values.mutable_data<float>(), n, width, label);
  data.x = values.prefix(Shape{n, features});
  values.reset();
  data.x.release_unseen();
  return data;
}

// Two interleaved spirals: class k is the arm r = t / t_max at angle t + k*pi. sqrt(u) spreads the points
// evenly by area instead of crowding the centre, where the two arms meet.
Dataset make_spirals(std::uint64_t seed) {
  constexpr std::int64_t kPoints = 1000;
  constexpr double kTurns = 1.75;
  constexpr double kNoise = 0.03;
  const double t_max = 2.0 * std::numbers::pi * kTurns;

  std::mt19937_64 rng(seed);
  std::vector<float> xs(static_cast<std::size_t>(kPoints * 2));
  std::vector<std::int32_t> ys(static_cast<std::size_t>(kPoints));
  for (std::int64_t i = 0; i < kPoints; ++i) {
    const int cls = static_cast<int>(i % 2);
    const double t = std::sqrt(uniform01(rng)) * t_max;
    const double angle = t + cls * std::numbers::pi;
    const double r = t / t_max;
    // Draw the two noise values in a fixed order: argument evaluation order is unspecified.
    const double nx = kNoise * standard_normal(rng);
    const double ny = kNoise * standard_normal(rng);
    xs[static_cast<std::size_t>(2 * i)] = static_cast<float>(r * std::cos(angle) + nx);
    xs[static_cast<std::size_t>(2 * i + 1)] = static_cast<float>(r * std::sin(angle) + ny);
    ys[static_cast<std::size_t>(i)] = cls;
  }
  Dataset data;
  data.name = "spirals";
  data.feature_names = {"x0", "x1"};
  data.num_classes = 2;
  data.x = Tensor::from_floats(Shape{kPoints, 2}, xs);
  data.y = Tensor::from_ints(Shape{kPoints}, ys);
  return data;
}

// Bytes in one row of t, whose first dimension is the row count.
std::size_t row_bytes(const Tensor& t) {
  std::int64_t per_row = 1;
  for (int d = 1; d < t.shape().rank(); ++d) per_row *= t.shape()[d];
  return static_cast<std::size_t>(per_row) * dtype_size(t.dtype());
}

}  // namespace

Tensor gather_rows(const Tensor& src, std::span<const std::int64_t> rows, Tensor& buffer) {
  const Shape shape = src.shape().with_batch(static_cast<std::int64_t>(rows.size()));
  if (!buffer.unique() || !(buffer.shape() == shape) || buffer.dtype() != src.dtype())
    buffer = Tensor::empty(src.dtype(), shape);
  const std::size_t bytes = row_bytes(src);
  const auto* from = static_cast<const char*>(src.raw_data());
  auto* to = buffer.mutable_data<char>();
  for (std::size_t i = 0; i < rows.size(); ++i)
    std::memcpy(to + i * bytes, from + static_cast<std::size_t>(rows[i]) * bytes, bytes);
  return buffer;
}

Tensor one_hot_rows(const Tensor& labels, std::span<const std::int64_t> rows, std::int64_t classes, Tensor& buffer) {
  const Shape shape{static_cast<std::int64_t>(rows.size()), classes};
  if (!buffer.unique() || !(buffer.shape() == shape) || buffer.dtype() != DType::kF32)
    buffer = Tensor::empty(DType::kF32, shape);
  float* out = buffer.mutable_data<float>();
  std::fill(out, out + shape.num_elements(), 0.0f);
  const std::int32_t* y = labels.data<std::int32_t>();
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::int32_t label = y[rows[i]];
    if (label >= 0 && label < classes) out[static_cast<std::int64_t>(i) * classes + label] = 1.0f;
  }
  return buffer;
}

std::vector<std::string> builtin_dataset_names() { return {"digits", "iris", "spirals"}; }

Dataset load_builtin(const std::string& name, std::uint64_t seed, const std::string& file_for_errors,
                     const std::string& where) {
  if (name == "spirals") return make_spirals(seed);
  if (name != "digits" && name != "iris")
    throw SpecError(file_for_errors, where,
                    "unknown dataset \"" + name + "\" (known: " + join(builtin_dataset_names()) + ")");

  const std::string path = (std::filesystem::path(data_dir()) / (name + ".csv")).string();
  // A missing shipped file is a broken install, not the user's mistake, hence RuntimeError.
  if (!std::filesystem::exists(path))
    throw RuntimeError("built-in dataset \"" + name + "\" not found at " + path +
                       " (set TENSORCTL_DATA_DIR to the folder holding " + name + ".csv)");
  CsvTable table = read_csv(path, CsvOptions{.header = true, .text_columns = {"label"}, .number_columns = {}});
  const int label = table.column_index("label");
  if (label < 0) throw RuntimeError(path + ": built-in dataset has no \"label\" column");
  Dataset data = dataset_from_table(std::move(table), path, label, true);
  data.name = name;
  return data;
}

void squeeze_out_column(float* cells, std::int64_t rows, std::int64_t width, std::int64_t column) {
  float* x = cells;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = cells + r * width;
    // memmove: a row's cells may overlap where they go (the first row's do, by up to its own width).
    std::memmove(x, row, static_cast<std::size_t>(column) * sizeof(float));
    x += column;
    std::memmove(x, row + column + 1, static_cast<std::size_t>(width - column - 1) * sizeof(float));
    x += width - column - 1;
  }
}

Dataset load_csv_dataset(const std::string& path, const std::string& label_column, bool classification,
                         const std::string& file_for_errors, const std::string& where, const CsvDataOptions& options) {
  CsvOptions csv{.header = options.header, .text_columns = {}, .number_columns = {}, .threads = options.threads};
  // Labels are read as text so that names are possible; a regression target must be a number.
  if (classification) csv.text_columns.push_back(label_column);
  // A text data set reads two columns; the others may hold anything.
  if (!options.text_column.empty()) {
    csv.text_columns.push_back(options.text_column);
    csv.number_columns = {label_column};
  }
  CsvTable table = read_csv(path, csv);
  const int label = table.column_index(label_column);
  if (label < 0)
    throw SpecError(file_for_errors, where,
                    "no column \"" + label_column + "\" in " + path + " (columns: " + join(table.columns) + ")");
  if (!options.text_column.empty()) {
    const int text = table.column_index(options.text_column);
    if (text < 0)
      throw SpecError(
          file_for_errors, "data.text.column",
          "no column \"" + options.text_column + "\" in " + path + " (columns: " + join(table.columns) + ")");
    if (text == label)
      throw SpecError(file_for_errors, "data.text.column", "the text column cannot be the label column too");
    Dataset data;
    data.name = std::filesystem::path(path).stem().string();
    data.x = Tensor::empty(DType::kF32, Shape{table.rows, 0});
    check_text_column_utf8(table, text, path);
    data.texts = std::move(table.text[static_cast<std::size_t>(text)]);
    set_labels(data, table, path, label, classification, options);
    return data;
  }
  if (table.columns.size() < 2)
    throw SpecError(file_for_errors, where,
                    path + " has only the label column \"" + label_column + "\"; no features are left");
  return dataset_from_table(std::move(table), path, label, classification, options);
}

std::int64_t Dataset::size() const {
  if (stream) return stream->size();
  return x.defined() ? x.shape()[0] : 0;
}

DataFingerprint fingerprint_of_parts(const FingerprintParts& parts) {
  std::uint64_t h = kFnvOffset;
  auto add = [&h](const void* bytes, std::size_t n) { h = fnv1a(bytes, n, h); };
  auto add_count = [&add](std::int64_t v) { add(&v, sizeof v); };
  // The shapes and sizes first, so bytes that merely move between the features and the labels, or between
  // class names, still change the hash.
  for (const auto& [shape, dtype] :
       {std::pair{parts.x_shape, parts.x_dtype}, std::pair{parts.y_shape, parts.y_dtype}}) {
    add_count(shape ? shape->rank() : -1);
    if (!shape) continue;
    for (int d = 0; d < shape->rank(); ++d) add_count((*shape)[d]);
    add_count(static_cast<std::int64_t>(dtype));
  }
  add_count(parts.num_classes);
  add_count(static_cast<std::int64_t>(parts.class_names.size()));
  for (const std::string& name : parts.class_names) {
    add_count(static_cast<std::int64_t>(name.size()));
    add(name.data(), name.size());
  }
  parts.bytes(add);
  // Only text data adds to the hash, so the fingerprints that checkpoints of other data recorded still match.
  parts.texts([&](std::string_view text) {
    add_count(static_cast<std::int64_t>(text.size()));
    add(text.data(), text.size());
  });
  const std::uint64_t values = h;
  h = kFnvOffset;
  add_count(static_cast<std::int64_t>(parts.feature_names.size()));
  for (const std::string& name : parts.feature_names) {
    add_count(static_cast<std::int64_t>(name.size()));
    add(name.data(), name.size());
  }
  return {parts.rows, values, h};
}

DataFingerprint fingerprint_of(const Dataset& data) {
  auto shape = [](const Tensor& t) { return t.defined() ? std::optional<Shape>(t.shape()) : std::nullopt; };
  auto dtype = [](const Tensor& t) { return t.defined() ? t.dtype() : DType::kF32; };
  return fingerprint_of_parts({.rows = data.size(),
                               .x_shape = shape(data.x),
                               .x_dtype = dtype(data.x),
                               .y_shape = shape(data.y),
                               .y_dtype = dtype(data.y),
                               .num_classes = data.num_classes,
                               .class_names = data.class_names,
                               .feature_names = data.feature_names,
                               .bytes =
                                   [&](FunctionRef<void(const void*, std::size_t)> add) {
                                     for (const Tensor* t : {&data.x, &data.y})
                                       if (t->defined()) add(t->raw_data(), t->bytes());
                                   },
                               .texts =
                                   [&](FunctionRef<void(std::string_view)> add) {
                                     for (const std::string& text : data.texts) add(text);
                                   }});
}

namespace {

// take_rows without the features: the labels, texts, paths and metadata of the rows.
Dataset take_rows_but_x(const Dataset& data, std::span<const std::int64_t> rows) {
  const std::int64_t n = data.size();
  for (std::int64_t r : rows) TCTL_CHECK(r >= 0 && r < n, "take_rows: row index out of range");
  Dataset out;
  Tensor y;
  if (data.y.defined()) out.y = gather_rows(data.y, rows, y);
  out.num_classes = data.num_classes;
  out.class_names = data.class_names;
  out.feature_names = data.feature_names;
  out.name = data.name;
  for (auto [from, to] : {std::pair{&data.texts, &out.texts}, std::pair{&data.paths, &out.paths}}) {
    if (from->empty()) continue;
    to->reserve(rows.size());
    for (std::int64_t r : rows) to->push_back((*from)[static_cast<std::size_t>(r)]);
  }
  return out;
}

// The rows `rows` of `x` (distinct, fewer than or as many as x has) moved to its front in that order, in
// place: following each cycle of the permutation with one row in hand. Returns them, a view of x's buffer,
// whose tail stays allocated as long as they live.
Tensor move_rows_to_front(Tensor x, std::span<const std::int64_t> rows) {
  const std::int64_t n = x.shape()[0];
  const std::size_t row_bytes = n > 0 ? x.bytes() / static_cast<std::size_t>(n) : 0;
  // Rows of no features (text, before it becomes ids) have nothing to move, and no buffer to move it in.
  if (row_bytes == 0) return x.leading_rows(static_cast<std::int64_t>(rows.size()));
  // The whole permutation: the rows asked for, then the others in order (where they land does not matter).
  std::vector<std::int64_t> from(rows.begin(), rows.end());
  std::vector<bool> taken(static_cast<std::size_t>(n), false);
  for (std::int64_t r : rows) taken[static_cast<std::size_t>(r)] = true;
  for (std::int64_t r = 0; r < n; ++r)
    if (!taken[static_cast<std::size_t>(r)]) from.push_back(r);
  auto* base = static_cast<unsigned char*>(x.raw_mutable_data());
  auto row = [&](std::int64_t i) { return base + static_cast<std::size_t>(i) * row_bytes; };
  std::vector<unsigned char> hand(row_bytes);
  std::vector<bool> done(static_cast<std::size_t>(n), false);
  for (std::int64_t start = 0; start < n; ++start) {
    if (done[static_cast<std::size_t>(start)] || from[static_cast<std::size_t>(start)] == start) continue;
    std::memcpy(hand.data(), row(start), row_bytes);
    std::int64_t at = start;
    while (true) {
      done[static_cast<std::size_t>(at)] = true;
      const std::int64_t next = from[static_cast<std::size_t>(at)];
      if (next == start) {
        std::memcpy(row(at), hand.data(), row_bytes);
        break;
      }
      std::memcpy(row(at), row(next), row_bytes);
      at = next;
    }
  }
  return x.leading_rows(static_cast<std::int64_t>(rows.size()));
}

}  // namespace

Dataset take_rows(const Dataset& data, std::span<const std::int64_t> rows) {
  Dataset out = take_rows_but_x(data, rows);
  Tensor x;
  out.x = gather_rows(data.x, rows, x);
  return out;
}

SplitOrder split_order(std::int64_t n, double test_split, double validation_split, bool shuffle, std::uint64_t seed) {
  TCTL_CHECK(test_split >= 0.0 && test_split < 1.0, "test_split must lie in [0, 1)");
  TCTL_CHECK(validation_split >= 0.0 && validation_split < 1.0, "validation_split must lie in [0, 1)");
  SplitOrder out;
  out.order.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) out.order[static_cast<std::size_t>(i)] = i;
  if (shuffle) {
    std::mt19937_64 rng(seed);
    for (std::int64_t i = n - 1; i > 0; --i) {
      auto j = static_cast<std::int64_t>(uniform_below(rng, static_cast<std::uint64_t>(i + 1)));
      std::swap(out.order[static_cast<std::size_t>(i)], out.order[static_cast<std::size_t>(j)]);
    }
  }
  out.test = static_cast<std::int64_t>(std::llround(static_cast<double>(n) * test_split));
  out.validation = static_cast<std::int64_t>(std::llround(static_cast<double>(n - out.test) * validation_split));
  return out;
}

SplitOrder with_fold(SplitOrder order, const Tensor& labels, std::int64_t folds, std::int64_t fold) {
  TCTL_CHECK(folds >= 2 && fold >= 1 && fold <= folds, "with_fold: fold out of range");
  const bool classes = labels.defined() && labels.dtype() == DType::kI32;
  std::unordered_map<std::int32_t, std::int64_t> seen;  // rows of each class so far
  std::vector<std::int64_t> validation, train;
  for (std::size_t i = static_cast<std::size_t>(order.test); i < order.order.size(); ++i) {
    const std::int64_t row = order.order[i];
    const std::int64_t place =
        classes ? seen[labels.data<std::int32_t>()[row]]++ : static_cast<std::int64_t>(i) - order.test;
    (place % folds == fold - 1 ? validation : train).push_back(row);
  }
  std::copy(validation.begin(), validation.end(), order.order.begin() + order.test);
  std::copy(train.begin(), train.end(), order.order.begin() + order.test + std::ssize(validation));
  order.validation = std::ssize(validation);
  return order;
}

Split split_dataset(Dataset data, double test_split, double validation_split, bool shuffle, std::uint64_t seed) {
  const SplitOrder order = split_order(data.size(), test_split, validation_split, shuffle, seed);
  return split_dataset(std::move(data), order);
}

Split split_dataset(Dataset data, const SplitOrder& parts) {
  const auto n_test = parts.test, n_validation = parts.validation;
  std::span<const std::int64_t> all(parts.order);
  const auto train_rows = all.subspan(static_cast<std::size_t>(n_test + n_validation));
  Split split;
  split.test = take_rows(data, all.subspan(0, static_cast<std::size_t>(n_test)));
  split.validation =
      take_rows(data, all.subspan(static_cast<std::size_t>(n_test), static_cast<std::size_t>(n_validation)));
  // Data nobody else holds keeps its buffer for the training rows, moved to its front in place, instead of a
  // copy of them beside it: a 60,000 x 784 table peaks at 1.3x its size, not 2x (bench/csv_load.sh).
  if (!data.x.defined() || !data.x.unique()) {
    split.train = take_rows(data, train_rows);
    return split;
  }
  split.train = take_rows_but_x(data, train_rows);
  split.train.x = move_rows_to_front(std::move(data.x), train_rows);
  split.train.x.release_unseen();  // the test and validation rows' old places
  return split;
}

void Standardizer::fit(const Tensor& x) {
  TCTL_CHECK(x.dtype() == DType::kF32 && x.shape().rank() == 2, "Standardizer::fit wants f32 [N, F]");
  fit_windows(x.shape()[1], [&](FunctionRef<void(const Tensor&)> visit) { visit(x); });
}

void Standardizer::fit_windows(std::int64_t f, FunctionRef<void(FunctionRef<void(const Tensor&)>)> windows) {
  mean.assign(static_cast<std::size_t>(f), 0.0f);
  std.assign(static_cast<std::size_t>(f), 1.0f);
  // Two passes over each window in double: the one-pass sum-of-squares formula cancels badly when |mean| >>
  // std. Row by row, each column summed in row order as a column-by-column walk sums it (the same bits), but
  // reading the rows in memory order, every column a lane of the vector adds: 10x faster on 60,000 x 784
  // rows (bench/csv_load.sh). The windows' means and squared deviations are then merged (Chan, Golub and
  // LeVeque), so a stream's rows are read once, not twice (bench/stream_large.sh); one window gives the
  // two-pass bits.
  std::vector<double> sums(static_cast<std::size_t>(f)), squares(static_cast<std::size_t>(f));
  std::vector<double> means(static_cast<std::size_t>(f), 0.0), deviations(static_cast<std::size_t>(f), 0.0);
  double* sum = sums.data();
  double* square = squares.data();
  double* merged_mean = means.data();
  double* merged_square = deviations.data();
  std::int64_t n = 0;
  windows([&](const Tensor& x) {
    TCTL_CHECK(x.dtype() == DType::kF32 && x.shape().rank() == 2 && x.shape()[1] == f,
               "Standardizer::fit wants f32 [N, F]");
    const std::int64_t k = x.shape()[0];
    if (k == 0) return;
    const float* p = x.data<float>();
    std::fill(sums.begin(), sums.end(), 0.0);
    std::fill(squares.begin(), squares.end(), 0.0);
    for (std::int64_t r = 0; r < k; ++r) {
      const float* row = p + r * f;
      for (std::int64_t c = 0; c < f; ++c) sum[c] += row[c];
    }
    for (std::int64_t c = 0; c < f; ++c) sum[c] /= static_cast<double>(k);  // now the window's means
    for (std::int64_t r = 0; r < k; ++r) {
      const float* row = p + r * f;
      for (std::int64_t c = 0; c < f; ++c) {
        const double d = row[c] - sum[c];
        square[c] += d * d;
      }
    }
    const double total = static_cast<double>(n + k);
    for (std::int64_t c = 0; c < f; ++c) {
      if (n == 0) {
        merged_mean[c] = sum[c];
        merged_square[c] = square[c];
        continue;
      }
      const double delta = sum[c] - merged_mean[c];
      merged_mean[c] += delta * static_cast<double>(k) / total;
      merged_square[c] += square[c] + delta * delta * static_cast<double>(n) * static_cast<double>(k) / total;
    }
    n += k;
  });
  if (n == 0) return;
  sum = merged_mean;
  square = merged_square;
  for (std::int64_t c = 0; c < f; ++c) {
    const double m = sum[c];
    const double s = std::sqrt(square[c] / static_cast<double>(n));
    mean[static_cast<std::size_t>(c)] = static_cast<float>(m);
    // A constant column can leave a few ulps of rounding as "deviation"; dividing by that would blow the
    // noise up to unit size, so anything below float resolution relative to the mean counts as constant.
    // A scale below the smallest normal float would read as 0 where denormals are flushed.
    if (s > 1e-6 * std::abs(m) && static_cast<float>(s) >= std::numeric_limits<float>::min())
      std[static_cast<std::size_t>(c)] = static_cast<float>(s);
  }
}

Tensor Standardizer::apply(Tensor x) const {
  TCTL_CHECK(x.dtype() == DType::kF32 && x.shape().rank() == 2, "Standardizer::apply wants f32 [N, F]");
  TCTL_CHECK(static_cast<std::size_t>(x.shape()[1]) == mean.size(), "Standardizer::apply: feature count differs");
  const std::int64_t n = x.shape()[0];
  const std::int64_t f = x.shape()[1];
  // In place when the caller handed over the only handle: no second copy of a table (bench/csv_load.sh).
  Tensor out = x.unique() ? x : Tensor::empty(DType::kF32, x.shape());
  const float* src = x.data<float>();
  float* dst = out.mutable_data<float>();
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t c = 0; c < f; ++c)
      dst[r * f + c] = (src[r * f + c] - mean[static_cast<std::size_t>(c)]) / std[static_cast<std::size_t>(c)];
  return out;
}

}  // namespace tctl
