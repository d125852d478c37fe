// CSV reader for data tables: data sets, prediction inputs.
//
// The format is RFC 4180's: a header row of column names (unless the caller says there is none), then one
// row per sample, cells separated by commas. A cell in double quotes may hold commas, line breaks and quotes
// (written twice: "say ""hi"""). Spaces and tabs around a cell are ignored. Lines may end in "\n" or "\r\n",
// the last line may lack its newline, and blank lines at the end are skipped. Cells are numbers, except in
// the columns the caller names as text (class names, identifiers to pass through).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/function_ref.h"
#include "core/tensor.h"

namespace tctl {

struct CsvOptions {
  // False: the file has no header row; its columns are named by position, "1", "2", ... (the first is "1",
  // as in awk and in our messages).
  bool header = true;
  // Columns whose cells may be any text (an empty cell included); their text is kept in CsvTable::text.
  // Names that are not columns of the file are ignored: the caller checks what it needs.
  std::vector<std::string> text_columns;
  // When not empty, only these columns (and the text columns) are read; the cells of any other column are not
  // checked, and are NaN in CsvTable::values. Empty: every column that is not text must hold numbers.
  std::vector<std::string> number_columns;
  // The most bytes the file may hold; 0: a quarter of this machine's memory. The file is read whole before it is
  // parsed, so a stream without end (`yes 1 | tensorctl predict ... --input /dev/stdin`) stops here, with a
  // SpecError, instead of filling memory.
  std::size_t max_bytes = 0;
  // What max_bytes is, for the message of a file past it ("a quarter of the memory limit"); empty: a quarter
  // of this machine's memory, the default's reason.
  std::string max_bytes_reason;
  // With a header row: called with its column names as soon as that row has been read, before any other, so
  // a file whose columns are wrong is refused at its first chunk rather than once all of it (a stream without
  // end) is in memory. May throw; the checks of the header read_csv makes itself come after.
  std::function<void(const std::vector<std::string>& columns)> check_header;
  // Threads parsing the rows, the caller's among them; 0: one per core. A file is parsed in pieces of whole
  // records, at least 1 MB each, so a small one takes one thread whatever this says.
  int threads = 0;
  // The least bytes of whole records a thread parses as one piece; the file is read again a block of 8 pieces
  // at a time. Tests set a few bytes, to cut small files at every kind of place.
  std::size_t piece_bytes = std::size_t{1} << 20;
};

// A parsed CSV file. Plain value; copy and move freely.
struct CsvTable {
  // Column names from the header row (or "1".."N"), in file order; unique and non-empty.
  std::vector<std::string> columns;
  // f32 [rows, columns.size()], row-major. In a text column a cell that is not a finite number is NaN here,
  // as is every cell of a column that is neither a number column nor a text column (CsvOptions).
  Tensor values;
  // For each column, its cells as written (quotes removed) when it is a text column; empty otherwise.
  std::vector<std::vector<std::string>> text;
  // Number of data rows (the header is not counted); at least 1.
  std::int64_t rows = 0;
  // The 1-based line in the file each data row starts on (size `rows`), so callers that check values later
  // can still point at "line N".
  std::vector<std::int64_t> row_lines;

  // Position of the column called `name` in `columns`, or -1 when there is none.
  int column_index(const std::string& name) const;
  // The value at data row `row`, column `column`.
  float at(std::int64_t row, int column) const {
    return values.data<float>()[static_cast<std::size_t>(row) * columns.size() + static_cast<std::size_t>(column)];
  }
  bool is_text(int column) const { return !text[static_cast<std::size_t>(column)].empty(); }
  // The text of a cell in a text column.
  const std::string& text_at(std::int64_t row, int column) const {
    return text[static_cast<std::size_t>(column)][static_cast<std::size_t>(row)];
  }
};

// Reads the CSV file at `path`. Numbers are parsed with std::from_chars, so the decimal point is always
// '.', whatever the locale; "1e-3" and a leading '+' are accepted, "nan" and "inf" are not.
//
// Throws SpecError with file = `path` and where = "line N" (1-based line in the file) for a user's mistake:
//   the file cannot be opened ("cannot open file: No such file or directory"; where is empty), a NUL byte (binary
//   data, refused at the 64 KiB chunk holding it, before the rest is read), the file is empty or holds only a
//   header, an empty or repeated column name, a row with the wrong number of cells ("expected 5 cells, got 4"),
//   a quoted cell that never closes or is followed by more text, an empty cell, or a cell that is not a finite
//   number (the message names the column and quotes the text).
// A file that cannot be read (a directory: "cannot read file: Is a directory") is a SpecError too. Throws
// RuntimeError when memory runs out. Thread-safe: touches no shared state.
CsvTable read_csv(const std::string& path, const CsvOptions& options = {});

// Reads the regular file at `path` a block of whole records at a time, for data larger than memory (a streamed
// run's first pass, models/data/row_cache.h): `on_header` gets the column names before any data row is read,
// then `use` gets each block's rows, in file order, as a CsvTable of its own (row_lines their lines in the
// file; the table's buffers are reused once `use` returns, so it keeps nothing of them). Holds about two
// blocks of 8 x options.piece_bytes of text and one block's values, whatever the file's size; max_bytes is
// not consulted. Throws as read_csv does, each error at the block it is in, and SpecError when `path` is
// not a regular file (standard input cannot be read twice, nor streamed into a cache).
void read_csv_blocks(const std::string& path, const CsvOptions& options,
                     FunctionRef<void(const std::vector<std::string>& columns)> on_header,
                     FunctionRef<void(CsvTable& block)> use);

// "WHAT "TEXT" holds the byte 0xNN at offset AT, which is not UTF-8; ...": the message for a name or a path
// that the run's JSON files could not record, `at` as first_non_utf8 found it.
std::string not_utf8_message(const std::string& what, std::string_view text, std::size_t at);

// Throws SpecError(path, "line N", ...) at the first cell of `table`'s text column `column` that is not UTF-8:
// a text column's tokens go into the run's vocabulary, in its JSON files (a file saved as Latin-1 or cp1252
// fails here, before training, rather than after the first epoch).
void check_text_column_utf8(const CsvTable& table, int column, const std::string& path);

// `v` as a CSV cell that reads back as the same float32: the shortest such digits (std::to_chars), "3" for 3,
// "0.1" for 0.1f, "1234561" where six significant digits would write 1.23457e+06 and move the value.
void append_csv_float(std::string& out, float v);

// `cell` as one CSV field: unchanged when it can be written plainly, else in double quotes with its quotes
// doubled (when it holds a comma, a quote, a line break, or spaces at either end, which the reader trims).
std::string csv_field(std::string_view cell);

}  // namespace tctl
