#include "models/data/csv.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string_view>
#include <unordered_set>

#include "core/errors.h"

namespace tctl {

namespace {

std::string line_where(std::int64_t line) { return "line " + std::to_string(line); }

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return s;
}

// Splits one line on commas. Always yields at least one cell, so "a,b," is three cells, the last empty:
// a trailing comma is reported as an empty cell rather than silently dropped.
std::vector<std::string_view> split_cells(std::string_view line) {
  std::vector<std::string_view> cells;
  std::size_t start = 0;
  while (true) {
    std::size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      cells.push_back(trim(line.substr(start)));
      return cells;
    }
    cells.push_back(trim(line.substr(start, comma - start)));
    start = comma + 1;
  }
}

float parse_cell(std::string_view text, const std::string& path, std::int64_t line, const std::string& column) {
  if (text.empty()) throw SpecError(path, line_where(line), "column \"" + column + "\": empty cell");
  std::string_view digits = text;
  // from_chars rejects a leading '+', which spreadsheets do write.
  if (digits.size() > 1 && digits.front() == '+' && digits[1] != '-') digits.remove_prefix(1);
  float value = 0.0f;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec == std::errc::result_out_of_range)
    throw SpecError(path, line_where(line),
                    "column \"" + column + "\": \"" + std::string(text) + "\" is out of range for float32");
  // NaN and infinity parse fine but would poison every statistic computed from the column.
  if (ec != std::errc() || end != digits.data() + digits.size() || !std::isfinite(value))
    throw SpecError(path, line_where(line),
                    "column \"" + column + "\": expected a finite number, got \"" + std::string(text) + "\"");
  return value;
}

}  // namespace

int CsvTable::column_index(const std::string& name) const {
  for (std::size_t i = 0; i < columns.size(); ++i)
    if (columns[i] == name) return static_cast<int>(i);
  return -1;
}

CsvTable read_csv(const std::string& path) {
  // Worded like read_file's messages. A directory would open and then fail to read, a RuntimeError. With the
  // error_code overload, a name the file system refuses (too long, a loop of links, no permission) is reported
  // with its reason; the throwing overloads let std::filesystem::filesystem_error escape.
  std::error_code status_error;
  const std::filesystem::file_status status = std::filesystem::status(path, status_error);
  if (std::filesystem::is_directory(status)) throw SpecError(path, "", "cannot open file: Is a directory");
  if (status_error) throw SpecError(path, "", "cannot open file: " + status_error.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SpecError(path, "", "cannot open file");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw RuntimeError(path + ": read failed");

  // Excel writes a UTF-8 byte order mark; without this the first column name would carry it.
  std::string_view rest = text;
  if (rest.substr(0, 3) == "\xEF\xBB\xBF") rest.remove_prefix(3);

  // Lines are collected first so that blank lines can be told apart: trailing ones are fine, a blank line
  // followed by more data is a broken file.
  std::vector<std::string_view> lines;
  while (!rest.empty()) {
    std::size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    if (nl == std::string_view::npos) break;
    rest.remove_prefix(nl + 1);
  }
  auto is_blank = [](std::string_view l) { return l.find_first_not_of(" \t") == std::string_view::npos; };
  while (!lines.empty() && is_blank(lines.back())) lines.pop_back();
  if (lines.empty()) throw SpecError(path, line_where(1), "empty file: expected a header row of column names");

  CsvTable table;
  std::unordered_set<std::string> seen;
  for (std::string_view name : split_cells(lines[0])) {
    std::string column(name);
    if (column.empty())
      throw SpecError(path, line_where(1),
                      "empty name for column " + std::to_string(table.columns.size() + 1) + " in the header row");
    if (!seen.insert(column).second)
      throw SpecError(path, line_where(1), "column name \"" + column + "\" appears twice in the header row");
    table.columns.push_back(std::move(column));
  }
  if (lines.size() == 1) throw SpecError(path, line_where(2), "no data rows after the header");

  const std::size_t width = table.columns.size();
  // Every cell is at least one character and a separator, so the file holds at most about half its size in
  // cells: a wide header over many short rows must not reserve rows x columns before the first row is read.
  table.values.reserve(std::min((lines.size() - 1) * width, text.size() / 2 + 1));
  table.row_lines.reserve(lines.size() - 1);
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const auto line = static_cast<std::int64_t>(i + 1);
    if (is_blank(lines[i])) throw SpecError(path, line_where(line), "blank line before the end of the data");
    std::vector<std::string_view> cells = split_cells(lines[i]);
    if (cells.size() != width)
      throw SpecError(path, line_where(line),
                      "expected " + std::to_string(width) + " cells, got " + std::to_string(cells.size()));
    for (std::size_t c = 0; c < width; ++c) table.values.push_back(parse_cell(cells[c], path, line, table.columns[c]));
    table.row_lines.push_back(line);
  }
  table.rows = static_cast<std::int64_t>(table.row_lines.size());
  return table;
}

}  // namespace tctl
