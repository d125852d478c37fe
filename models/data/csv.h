// CSV reader for numeric tables: data sets, prediction inputs.
//
// The format is the plain one: a header row of column names, then one row per sample, cells separated by
// commas, every cell a number. Quoting with embedded commas is not supported (cells are numbers); a pair of
// double quotes around a whole cell or name is removed. Spaces and tabs around a cell are ignored. Lines may
// end in "\n" or "\r\n", the last line may lack its newline, and blank lines at the end are skipped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tctl {

// A parsed CSV file. Plain value; copy and move freely.
struct CsvTable {
  // Column names from the header row, in file order; unique and non-empty.
  std::vector<std::string> columns;
  // rows * columns.size() cells, row-major: cell (r, c) is values[r * columns.size() + c].
  std::vector<float> values;
  // Number of data rows (the header is not counted); at least 1.
  std::int64_t rows = 0;
  // The 1-based line in the file each data row came from (size `rows`), so callers that check values
  // later can still point at "line N".
  std::vector<std::int64_t> row_lines;

  // Position of the column called `name` in `columns`, or -1 when there is none.
  int column_index(const std::string& name) const;
  // The value at data row `row`, column `column`.
  float at(std::int64_t row, int column) const {
    return values[static_cast<std::size_t>(row) * columns.size() + static_cast<std::size_t>(column)];
  }
};

// Reads the CSV file at `path`. Numbers are parsed with std::from_chars, so the decimal point is always
// '.', whatever the locale; "1e-3" and a leading '+' are accepted, "nan" and "inf" are not.
//
// Throws SpecError with file = `path` and where = "line N" (1-based line in the file) for a user's mistake:
//   the file cannot be opened ("cannot open file: No such file or directory"; where is empty), the file is empty or
//   holds only a header, an empty or repeated column name, a row with the wrong number of cells ("expected 5 cells, got
//   4"), an empty cell, or a cell that is not a finite number (the message names the column and quotes the text).
// Throws RuntimeError when reading fails part-way. Thread-safe: touches no shared state.
CsvTable read_csv(const std::string& path);

}  // namespace tctl
