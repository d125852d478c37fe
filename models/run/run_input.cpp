#include "models/run/run_input.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string_view>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/errors.h"
#include "core/read_whole.h"
#include "core/text.h"
#include "models/data/arrays.h"
#include "models/data/csv.h"
#include "models/data/images.h"
#include "models/data/row_stream.h"
#include "models/io/run_layout.h"
#include "models/nn/memory_budget.h"
#include "models/record/prepared_data.h"

namespace tctl {

namespace {

SpecError missing_column(const LoadedRun& run, const std::string& csv_path, const std::string& name) {
  return SpecError(csv_path, "line 1",
                   "missing column \"" + name + "\" (the model was trained on: " + join_first(run.feature_names) + ")");
}

std::string row_place(const CsvTable& table, std::int64_t r) {
  return "line " + std::to_string(table.row_lines[static_cast<std::size_t>(r)]);
}

// Other columns of a file with a header are none of our business; a headerless file's are all features.
CsvOptions run_csv_options(const LoadedRun& run, const std::string& csv_path,
                           const std::vector<std::string>& keep_columns) {
  const bool header = run.config.data.header;
  CsvOptions options{.header = header, .text_columns = keep_columns, .number_columns = {}};
  if (run.num_classes > 0) options.text_columns.push_back(run.label);
  if (header) {
    options.number_columns = run.feature_names;
    for (const std::string& t : target_columns(run.label, run.targets)) options.number_columns.push_back(t);
    // Checked as soon as the header is read: `yes 1 | tensorctl predict --input -` is refused at once.
    // A set of the features, not of the columns: a header of millions of names costs no more than its cells.
    options.check_header = [&run, &csv_path](const std::vector<std::string>& columns) {
      std::unordered_set<std::string_view> missing(run.feature_names.begin(), run.feature_names.end());
      for (const std::string& name : columns) missing.erase(name);
      for (const std::string& name : run.feature_names)
        if (missing.contains(name)) throw missing_column(run, csv_path, name);
    };
  }
  // The file is read whole, then parsed to floats and kept text: a quarter of what the model may take.
  options.max_bytes = static_cast<std::size_t>(memory_limit_bytes() / 4);
  options.max_bytes_reason = "a quarter of the memory limit: this machine's memory, or TENSORCTL_MEMORY_LIMIT";
  return options;
}

// The table's column of each of the run's features, in the run's order. A headerless file of the features
// alone has its columns named after them first.
std::vector<int> feature_columns(const LoadedRun& run, CsvTable& table, const std::string& csv_path,
                                 const std::vector<std::string>& keep_columns) {
  const bool header = run.config.data.header;
  const std::int64_t f = static_cast<std::int64_t>(run.feature_names.size());
  if (!header && static_cast<std::int64_t>(table.columns.size()) == f) table.columns = run.feature_names;
  // Without names, a column past the ones the run knows cannot be told from a shifted feature: refuse it.
  auto listed = [](const std::vector<std::string>& names, const std::string& name) {
    return std::ranges::find(names, name) != names.end();
  };
  if (!header)
    for (const std::string& name : table.columns)
      if (name != run.label && !listed(run.feature_names, name) && !listed(keep_columns, name))
        throw SpecError(csv_path, row_place(table, 0),
                        fmt::format("{} cells, but a row without a header holds the model's {} features, in order, "
                                    "and at most the label as column {}; column {} is neither (or keep it with "
                                    "--keep-columns {})",
                                    table.columns.size(), f, run.label, name, name));
  std::vector<int> cols;
  for (const auto& name : run.feature_names) {
    int c = table.column_index(name);
    if (c < 0) throw missing_column(run, csv_path, name);
    // A feature read as text (also kept, or a headerless file's renamed column) must still be numbers.
    if (table.is_text(c))
      for (std::int64_t r = 0; r < table.rows; ++r)
        if (std::isnan(table.at(r, c)))
          throw SpecError(csv_path, row_place(table, r),
                          "column \"" + name + "\": expected a finite number, got \"" + table.text_at(r, c) + "\"");
    cols.push_back(c);
  }
  return cols;
}

void add_kept_columns(const CsvTable& table, const std::string& csv_path, const std::vector<std::string>& keep_columns,
                      RunInput& in) {
  for (const auto& name : keep_columns) {
    const int c = table.column_index(name);
    if (c < 0)
      throw SpecError(
          csv_path, "line 1",
          "no column \"" + name + "\" to keep (--keep-columns; the columns are " + join_first(table.columns, 16) + ")");
    in.kept_names.push_back(name);
    in.kept.push_back(table.text[static_cast<std::size_t>(c)]);
  }
}

// The features of every row, [rows, features], scaled by the run's scaling; `place(r)` names row r in a
// refusal ("line 7" of a CSV, "row 6" of an array).
template <class Place>
Tensor scaled_features(const LoadedRun& run, const Tensor& x, const std::string& path, Place place) {
  const std::int64_t rows = x.shape()[0], f = static_cast<std::int64_t>(run.feature_names.size());
  // Rows for a model whose inputs are token ids (Sequential::id_layer) hold ids, refused here naming the row rather
  // than in the middle of a batch.
  if (const auto bad = find_bad_token_id(run.model->net(), x, run.feature_names))
    throw SpecError(path, place(bad->row), bad->message);
  Tensor scaled_x = run.standardized ? run.standardizer.apply(x) : x;
  // A float like 3.4e38 is read as written, but scaled by a small deviation it leaves the floats.
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < f; ++j)
      if (!std::isfinite(scaled_x.data<float>()[r * f + j])) {
        const auto col = static_cast<std::size_t>(j);
        throw SpecError(path, place(r),
                        fmt::format("column \"{}\": {:.9g} lies so far from the training data (mean {:.6g}, "
                                    "deviation {:.6g}) that its scaled value overflows a float",
                                    run.feature_names[col], x.data<float>()[r * f + j], run.standardizer.mean[col],
                                    run.standardizer.std[col]));
      }
  return scaled_x;
}

// The table's features in the run's order, [rows, features].
Tensor table_features(const LoadedRun& run, const CsvTable& table, const std::vector<int>& cols) {
  const std::int64_t f = static_cast<std::int64_t>(run.feature_names.size());
  Tensor x = Tensor::empty(DType::kF32, Shape{table.rows, f});
  for (std::int64_t r = 0; r < table.rows; ++r)
    for (std::int64_t j = 0; j < f; ++j)
      x.mutable_data<float>()[r * f + j] = table.at(r, cols[static_cast<std::size_t>(j)]);
  return x;
}

// The first 32 bytes of the file at `path` (a BMP is told by its header's size at byte 14); none for standard
// input, which is read once, as CSV.
std::string input_head(const std::string& path) { return path == "-" ? "" : file_head(path, 32); }

// Whether the file at `path` is an array file (models/data/arrays.h), by its first bytes.
bool is_array_file(const std::string& path) { return looks_like_array_file(input_head(path)); }

// An array of rows of features for the run: [N, ...], each row flattened to the run's features, in order.
RunInput read_array_input(const LoadedRun& run, const std::string& path, const std::vector<std::string>& keep_columns) {
  if (!keep_columns.empty()) throw SpecError(path, "", "--keep-columns names columns of a CSV; an array file has none");
  const ArrayFile a = load_array(path);
  const std::int64_t f = static_cast<std::int64_t>(run.feature_names.size());
  if (a.shape.empty()) throw SpecError(path, "header", "a scalar holds no rows: an array of data has a first axis");
  const std::int64_t n = a.shape[0];
  const std::int64_t width = n > 0 ? static_cast<std::int64_t>(a.values.size()) / n : f;
  if (width != f)
    throw SpecError(path, "header",
                    fmt::format("rows of {} elements (shape ({})), but the model takes {} features", width,
                                fmt::join(a.shape, ", "), f));
  for (std::size_t i = 0; i < a.values.size(); ++i)
    if (!std::isfinite(a.values[i]))
      throw SpecError(
          path, fmt::format("row {}", static_cast<std::int64_t>(i) / f),
          fmt::format("column \"{}\": expected a finite number, got {}",
                      run.feature_names[i % static_cast<std::size_t>(f)], static_cast<double>(a.values[i])));
  RunInput in;
  in.rows = n;
  in.array_rows = true;
  const Tensor x = Tensor::from_floats(Shape{n, f}, a.values);
  in.x = shape_for_model(scaled_features(run, x, path, [](std::int64_t r) { return "row " + std::to_string(r); }),
                         run.model->net());
  return in;
}

// The rows with their labels from columns `label_cols` (target_columns: one, or a regression's T), a class
// mapped to the run's classes; a class label the model has no output for is refused, naming its line.
Dataset labelled_rows(const LoadedRun& run, const CsvTable& table, const std::string& csv_path,
                      const std::vector<int>& label_cols, const Tensor& x) {
  Dataset labelled;
  labelled.name = std::filesystem::path(csv_path).stem().string();
  labelled.feature_names = run.feature_names;
  const CsvDataOptions labels{
      .header = run.config.data.header, .named_labels = !run.class_names.empty(), .classes = run.class_names};
  if (run.num_classes > 0)
    set_labels(labelled, table, csv_path, label_cols[0], true, labels);
  else
    set_targets(labelled, table, csv_path, label_cols);
  const std::int64_t outputs = run.model->net().output_shape().num_elements();
  if (run.num_classes > 0 && labelled.num_classes > outputs)
    for (std::int64_t r = 0; r < table.rows; ++r)
      if (const std::int32_t y = labelled.y.data<std::int32_t>()[r]; y >= outputs)
        throw SpecError(
            csv_path, row_place(table, r),
            fmt::format("label {} does not fit the model's {} outputs ({} {}); labels must lie in 0..{}", y, outputs,
                        RunLayout(run.dir).model().string(), last_layer_key(run.model->net()), outputs - 1));
  labelled.x = x;
  return labelled;
}

// A CSV of input for a run whose column `column` holds text (a text run's documents, an image run's paths),
// its label column read as numbers when there is one, and that column's index. `missing` is the message for
// a header without the column.
std::pair<CsvTable, int> read_with_text_column(const LoadedRun& run, const std::string& csv_path,
                                               const std::vector<std::string>& keep_columns, const std::string& column,
                                               const std::string& missing) {
  CsvOptions options = run_csv_options(run, csv_path, keep_columns);
  options.text_columns.push_back(column);
  options.number_columns = {run.label};
  options.check_header = [&](const std::vector<std::string>& columns) {
    if (std::ranges::find(columns, column) == columns.end()) throw SpecError(csv_path, "line 1", missing);
  };
  CsvTable table = read_csv(csv_path, options);
  const int index = table.column_index(column);
  if (index < 0) throw SpecError(csv_path, "line 1", missing);
  return {std::move(table), index};
}

// The rows' labels, when the table has the run's label columns (all of them) and rows: evaluate's input.
void add_labels(RunInput& in, const LoadedRun& run, const CsvTable& table, const std::string& csv_path) {
  if (table.rows == 0) return;
  std::vector<int> cols;
  for (const std::string& name : target_columns(run.label, run.targets)) {
    cols.push_back(table.column_index(name));
    if (cols.back() < 0) return;
  }
  in.labelled = labelled_rows(run, table, csv_path, cols, in.x);
}

// A CSV for a run trained on text: its text column becomes ids through the run's vocabulary; other columns
// but the label and the kept ones are ignored.
RunInput read_text_input(const LoadedRun& run, const std::string& csv_path,
                         const std::vector<std::string>& keep_columns) {
  const std::string& column = run.text->options().column;
  // Not a structured binding: the lambda below captures the table, which clang 14 cannot do with one.
  const auto read = read_with_text_column(
      run, csv_path, keep_columns, column,
      fmt::format("missing column {}: the model was trained on its text", quote_for_message(column)));
  const CsvTable& table = read.first;
  const int text_col = read.second;
  RunInput in;
  add_kept_columns(table, csv_path, keep_columns, in);
  in.rows = table.rows;
  in.row_lines = table.row_lines;
  const Tensor ids = run.text->vectorize(table.text[static_cast<std::size_t>(text_col)]);
  in.x = shape_for_model(scaled_features(run, ids, csv_path, [&table](std::int64_t r) { return row_place(table, r); }),
                         run.model->net());
  add_labels(in, run, table, csv_path);
  return in;
}

// Input for a run trained on images: a folder (every image under it), one image file, or a CSV with a "path"
// column (paths relative to the CSV's folder; a label column is optional), as the run's test.csv is. Each
// row's path comes first in the output.
RunInput read_image_input(const LoadedRun& run, const std::string& path, const std::vector<std::string>& keep_columns) {
  RunInput in;
  std::vector<std::string> paths;
  std::error_code ec;
  const std::string path_column(kImagePathColumn);
  std::optional<CsvTable> table;
  if (std::filesystem::is_directory(path, ec)) {
    paths = list_images(path);
    if (paths.empty())
      throw SpecError(path, "", fmt::format("no {} file in this folder or below it", image_extensions_in_words()));
  } else if (looks_like_image(input_head(path))) {
    paths = {path};
  } else {
    auto [read, c] = read_with_text_column(run, path, keep_columns, path_column,
                                           "missing column \"path\": a CSV for a model trained on images lists "
                                           "their paths (or give a folder or an image)");
    table = std::move(read);
    const std::filesystem::path base =
        path == "-" ? std::filesystem::path() : std::filesystem::path(path).parent_path();
    for (const std::string& p : table->text[static_cast<std::size_t>(c)])
      paths.push_back(std::filesystem::path(p).is_absolute() ? p : (base / p).string());
    add_kept_columns(*table, path, keep_columns, in);
    in.row_lines = table->row_lines;
  }
  if (table == std::nullopt && !keep_columns.empty())
    throw SpecError(path, "", "--keep-columns names columns of a CSV; a folder or an image has none");
  in.rows = static_cast<std::int64_t>(paths.size());
  in.array_rows = table == std::nullopt;
  const Tensor x = load_images(paths, *run.images, 0);
  in.x = shape_for_model(scaled_features(run, x, path,
                                         [&](std::int64_t r) {
                                           return table ? row_place(*table, r) : paths[static_cast<std::size_t>(r)];
                                         }),
                         run.model->net());
  in.kept_names.insert(in.kept_names.begin(), path_column);
  in.kept.insert(in.kept.begin(), paths);
  if (table) add_labels(in, run, *table, path);
  return in;
}

}  // namespace

RunInput read_run_input(const LoadedRun& run, const std::string& csv_path,
                        const std::vector<std::string>& keep_columns) {
  if (run.images) return read_image_input(run, csv_path, keep_columns);
  if (is_array_file(csv_path)) return read_array_input(run, csv_path, keep_columns);
  if (run.text) return read_text_input(run, csv_path, keep_columns);
  CsvTable table = read_csv(csv_path, run_csv_options(run, csv_path, keep_columns));
  const std::vector<int> cols = feature_columns(run, table, csv_path, keep_columns);
  RunInput in;
  add_kept_columns(table, csv_path, keep_columns, in);
  in.rows = table.rows;
  in.x = shape_for_model(scaled_features(run, table_features(run, table, cols), csv_path,
                                         [&table](std::int64_t r) { return row_place(table, r); }),
                         run.model->net());
  in.row_lines = table.row_lines;
  add_labels(in, run, table, csv_path);
  return in;
}

Dataset read_run_test_split(const LoadedRun& run, const std::string& config_path) {
  TrainConfig c = load_train_config(config_path);
  // The data is checked against the run's model, so messages must name the run's model file.
  c.model_file = RunLayout(run.dir).model().string();
  c.model_path = "";
  // A streamed config's cache is looked for in the run's directory, where its training left it.
  c.output = run.dir.string();
  // The config's split decides the rows; the run's own scaling must be used on them.
  // Ids from the run's own vocabulary, not from one learned afresh from the config's training rows.
  PreparedData raw = prepare_data(c, run.model->net(), &run.class_names, run.text ? &*run.text : nullptr);
  Dataset data = raw.test_raw;
  if (data.stream) {
    // A streamed config: the rows stay in the data's cache, scaled a window at a time.
    data.stream = data.stream->prepared(run.standardized ? std::optional(run.standardizer) : std::nullopt,
                                        run.model->net().input_shape());
  } else {
    data.x = run.standardized ? run.standardizer.apply(data.x) : data.x;
    data.x = data.x.reshaped(Shape::concat(data.size(), run.model->net().input_shape()));
  }
  if (data.size() == 0)
    throw SpecError(config_path, "data.test_split", "the test split is empty, so there is nothing to evaluate");
  return data;
}

void check_finite_outputs(const Tensor& outputs, const RunInput& in, const std::string& csv_path) {
  const std::int64_t n = in.rows;
  const std::int64_t width = n ? outputs.num_elements() / n : 0;
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t j = 0; j < width; ++j)
      if (const float v = outputs.data<float>()[r * width + j]; !std::isfinite(v))
        throw SpecError(csv_path, in.place(r),
                        fmt::format("the model's output {} for this row is {}: the row's values lie too far from the "
                                    "data the model was trained on",
                                    j, v));
}

}  // namespace tctl
