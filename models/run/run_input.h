// New rows for a loaded run: a CSV of features read, checked and scaled as the run's training data was, and
// a config's test split prepared with the run's own scaling.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/data/dataset.h"
#include "models/run/loaded_run.h"

namespace tctl {

// Reads a CSV of features for a loaded run, or an array file (.npy or IDX, models/data/arrays.h, told by its
// first bytes) of rows that flatten to the run's features in order, without labels or kept columns: the columns are the
// run's feature names, in any order, and the label column is optional; `keep_columns` are passed through as text. When
// the run's data had no header row, neither has this file: it holds the training file's columns, or the features alone,
// in order. Returns scaled features shaped for the model, and labels when present. Throws SpecError naming the file and
// line for a missing column, a cell that is not a number, or a class the run does not know.
struct RunInput {
  Tensor x;
  Dataset labelled;  // x and y when the CSV has the label column; size() == 0 otherwise
  std::int64_t rows = 0;
  std::vector<std::string> kept_names;         // keep_columns
  std::vector<std::vector<std::string>> kept;  // their cells: kept[k][row], as written
  std::vector<std::int64_t> row_lines;         // each row's line in the file, for messages
  bool array_rows = false;                     // read from an array file, whose rows have no lines
  // Row r of the input in a message: "line 7" of a CSV, "row 6" of an array.
  std::string place(std::int64_t r) const {
    return array_rows ? "row " + std::to_string(r) : "line " + std::to_string(row_lines[static_cast<std::size_t>(r)]);
  }
};
// A row whose features, once scaled, are not finite floats is refused (SpecError naming the file, the line
// and the column).
RunInput read_run_input(const LoadedRun& run, const std::string& csv_path,
                        const std::vector<std::string>& keep_columns = {});
// Refuses (SpecError naming the file and the row's line) model outputs for `in`'s rows that are not finite:
// finite inputs far outside the training data can overflow the model's sums, and a NaN must not be
// printed as a probability or counted as a correct class.
void check_finite_outputs(const Tensor& outputs, const RunInput& in, const std::string& csv_path);

// The test split of the train config at `config_path`, as that config splits its data, with the labels mapped
// to the run's classes and the rows scaled by the run's own scaling. Throws SpecError naming the config when
// its data does not fit the run's model, or its test split is empty.
Dataset read_run_test_split(const LoadedRun& run, const std::string& config_path);

}  // namespace tctl
