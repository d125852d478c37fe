#include "models/data/csv.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <unordered_set>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/read_whole.h"

namespace tctl {

namespace {

std::string line_where(std::int64_t line) { return "line " + std::to_string(line); }

bool is_space(char c) { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// Excel writes a UTF-8 byte order mark; without this the first column name would carry it.
std::string_view without_bom(std::string_view text) {
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  return text;
}

// Splits the text into records (RFC 4180): cells separated by commas, records by line ends, a cell in double
// quotes may hold both and doubles its quotes. Keeps the line count, which quoted line breaks advance.
class Tokenizer {
 public:
  Tokenizer(std::string_view text, const std::string& path) : text_(text), path_(path) {}

  // Reads the next record into `cells` (reusing their storage); false at the end of the text. `blank` is set
  // when the record is one empty, unquoted cell: a line holding nothing but spaces.
  bool next(std::vector<std::string>& cells, bool& blank) {
    if (pos_ >= text_.size()) return false;
    record_line_ = line_;
    std::size_t count = 0;
    blank = true;
    while (true) {
      if (count == cells.size()) cells.emplace_back();
      std::string& cell = cells[count++];
      cell.clear();
      while (pos_ < text_.size() && is_space(text_[pos_])) ++pos_;
      if (pos_ < text_.size() && text_[pos_] == '"') {
        read_quoted(cell, count);
        blank = false;
      } else {
        const std::size_t start = pos_;
        while (pos_ < text_.size() && text_[pos_] != ',' && text_[pos_] != '\n') ++pos_;
        std::string_view raw = text_.substr(start, pos_ - start);
        if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
        cell.assign(trim(raw));
        if (!cell.empty()) blank = false;
      }
      if (pos_ >= text_.size()) break;
      if (text_[pos_] == ',') {
        ++pos_;
        blank = false;
        continue;
      }
      ++pos_;  // the '\n'
      ++line_;
      break;
    }
    cells.resize(count);
    return true;
  }

  std::int64_t record_line() const { return record_line_; }

 private:
  // The cell starting at the opening quote at pos_; leaves pos_ at the ',' or line end after it.
  void read_quoted(std::string& cell, std::size_t number) {
    const std::int64_t opened = line_;
    ++pos_;
    while (true) {
      if (pos_ >= text_.size())
        throw SpecError(path_, line_where(opened),
                        "cell " + std::to_string(number) + ": the quote opened here never closes");
      const char c = text_[pos_++];
      if (c == '"') {
        if (pos_ < text_.size() && text_[pos_] == '"') {
          cell += '"';
          ++pos_;
          continue;
        }
        break;
      }
      if (c == '\n') ++line_;
      cell += c;
    }
    while (pos_ < text_.size() && is_space(text_[pos_])) ++pos_;
    if (pos_ < text_.size() && text_[pos_] == '\r' && (pos_ + 1 == text_.size() || text_[pos_ + 1] == '\n')) ++pos_;
    if (pos_ < text_.size() && text_[pos_] != ',' && text_[pos_] != '\n')
      throw SpecError(path_, line_where(line_),
                      "cell " + std::to_string(number) +
                          ": text after the closing quote (a quote inside a quoted cell is written twice: \"\")");
  }

  std::string_view text_;
  const std::string& path_;
  std::size_t pos_ = 0;
  std::int64_t line_ = 1;
  std::int64_t record_line_ = 1;
};

// The cell as a finite float; false when it is not one (out of float range included).
bool parse_number(std::string_view text, float& value, bool& out_of_range) {
  text = trim(text);
  out_of_range = false;
  // from_chars rejects a leading '+', which spreadsheets do write.
  if (text.size() > 1 && text.front() == '+' && text[1] != '-') text.remove_prefix(1);
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  // from_chars calls a magnitude below the smallest denormal (1e-46) out of range too; it rounds to zero (or
  // a denormal), as any conversion to float does. Only too large a magnitude is out of range.
  if (ec == std::errc::result_out_of_range && end == text.data() + text.size()) {
    const std::string copy(text);
    const double wide = std::strtod(copy.c_str(), nullptr);
    if (std::fabs(wide) < 1.0) {
      value = static_cast<float>(wide);
      ec = std::errc();
    }
  }
  out_of_range = ec == std::errc::result_out_of_range;
  // NaN and infinity parse fine but would poison every statistic computed from the column.
  return ec == std::errc() && end == text.data() + text.size() && std::isfinite(value);
}

float parse_cell(const std::string& text, const std::string& path, std::int64_t line, const std::string& column) {
  if (text.empty()) throw SpecError(path, line_where(line), "column " + quote_for_message(column) + ": empty cell");
  float value = 0.0f;
  bool out_of_range = false;
  if (parse_number(text, value, out_of_range)) return value;
  if (out_of_range)
    throw SpecError(
        path, line_where(line),
        "column " + quote_for_message(column) + ": " + quote_for_message(text) + " is out of range for float32");
  throw SpecError(path, line_where(line),
                  "column " + quote_for_message(column) + ": expected a finite number, got " + quote_for_message(text));
}

// A quarter of this machine's memory: what CsvOptions::max_bytes = 0 stands for. The text's buffer doubles as
// it grows, so reading up to the limit may hold three times as much for a moment; parsing it adds the values.
std::size_t quarter_of_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return std::numeric_limits<std::size_t>::max();
  return static_cast<std::size_t>(pages) / 4 * static_cast<std::size_t>(page);
}

// "12288 MiB" from 1 MiB up, else "N bytes".
std::string byte_size(std::size_t bytes) {
  return bytes >= (std::size_t{1} << 20) ? std::to_string(bytes >> 20) + " MiB" : std::to_string(bytes) + " bytes";
}

// The file's bytes, at most max_bytes (0: a quarter of memory). Read a chunk at a time and checked as it comes: no
// text holds a NUL byte, so binary data (/dev/urandom, a compressed or UTF-16 file) is refused at the first
// chunk holding one, and text past the limit (a stream that never ends) at the chunk that crosses it; neither
// is read to its end or until memory runs out.
std::string read_text(const std::string& path, const CsvOptions& options) {
  std::size_t max_bytes = options.max_bytes;
  const bool quarter = max_bytes == 0;
  if (quarter) max_bytes = quarter_of_memory();
  // The header row ends at the first line break outside quotes; each chunk is scanned once.
  bool header_seen = !options.header || !options.check_header;
  bool in_quotes = false;
  auto check_header = [&](std::string_view got, const std::string& kept) {
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (got[i] == '"') in_quotes = !in_quotes;
      if (got[i] != '\n' || in_quotes) continue;
      header_seen = true;
      std::string row = kept;
      row.append(got.substr(0, i + 1));
      Tokenizer tokens(without_bom(row), path);
      std::vector<std::string> cells;
      bool blank = false;
      if (tokens.next(cells, blank) && !blank) options.check_header(cells);
      return;
    }
  };
  // "-" is standard input, as --output - is standard output; messages still name it "-".
  return read_whole(
      path == "-" ? std::filesystem::path("/dev/stdin") : std::filesystem::path(path), path,
      {.max_bytes = max_bytes,
       .inspect =
           [&](std::string_view got, const std::string& kept) {
             // Binary data first: its bytes are no header.
             const std::size_t nul = got.find('\0');
             if (nul == std::string_view::npos) {
               if (!header_seen) check_header(got, kept);
               return;
             }
             const std::int64_t line = 1 + std::count(kept.begin(), kept.end(), '\n') +
                                       std::count(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(nul), '\n');
             throw SpecError(
                 path, line_where(line),
                 "byte " + std::to_string(kept.size() + nul + 1) +
                     " is a NUL byte, which no CSV text holds: this is binary data (or UTF-16 text: save it "
                     "as UTF-8)");
           },
       .too_large =
           [&](const char*) {
             const std::string reason = quarter ? "a quarter of this machine's memory" : options.max_bytes_reason;
             return "larger than " + byte_size(max_bytes) + (reason.empty() ? "" : " (" + reason + ")") +
                    ", the most a CSV file may hold here: it is read whole before it is parsed";
           }});
}

// The records of the text that are not blank lines. Blank lines at the end are fine; a blank line followed
// by more data is a broken file.
class Records {
 public:
  Records(std::string_view text, const std::string& path) : tokens_(text, path), path_(path) {}

  // Reads the next record that is not blank into cells(); false at the end of the text.
  bool next() {
    std::int64_t first_blank = 0;
    bool blank = false;
    while (tokens_.next(cells_, blank)) {
      if (!blank) {
        if (first_blank != 0) throw SpecError(path_, line_where(first_blank), "blank line before the end of the data");
        return true;
      }
      if (first_blank == 0) first_blank = tokens_.record_line();
    }
    return false;
  }

  std::vector<std::string>& cells() { return cells_; }
  // The line the last record read starts on.
  std::int64_t line() const { return tokens_.record_line(); }

 private:
  Tokenizer tokens_;
  const std::string& path_;
  std::vector<std::string> cells_;
};

// The column names of the header row `cells` (moved out), refused when one is empty, repeated or not UTF-8.
std::vector<std::string> header_columns(std::vector<std::string>& cells, const std::string& path) {
  std::vector<std::string> columns;
  std::unordered_set<std::string> seen;
  for (std::string& column : cells) {
    if (column.empty())
      throw SpecError(path, line_where(1),
                      "empty name for column " + std::to_string(columns.size() + 1) + " in the header row");
    if (!seen.insert(column).second)
      throw SpecError(path, line_where(1),
                      "column name " + quote_for_message(column) + " appears twice in the header row");
    if (const auto bad = first_non_utf8(column))
      throw SpecError(path, line_where(1),
                      not_utf8_message("column " + std::to_string(columns.size() + 1) + "'s name", column, *bad));
    columns.push_back(std::move(column));
  }
  return columns;
}

enum class CellKind { kNumber, kText, kSkipped };

// How each of the table's columns is read, from the options' number and text columns.
std::vector<CellKind> column_kinds(const CsvTable& table, const CsvOptions& options) {
  std::vector<CellKind> kinds(table.columns.size(),
                              options.number_columns.empty() ? CellKind::kNumber : CellKind::kSkipped);
  for (const auto& name : options.number_columns)
    if (int c = table.column_index(name); c >= 0) kinds[static_cast<std::size_t>(c)] = CellKind::kNumber;
  for (const auto& name : options.text_columns)
    if (int c = table.column_index(name); c >= 0) kinds[static_cast<std::size_t>(c)] = CellKind::kText;
  return kinds;
}

// Appends the data row `cells` (its text cells moved out), which starts on `line`, to the table.
void append_row(CsvTable& table, std::vector<std::string>& cells, const std::vector<CellKind>& kinds, std::int64_t line,
                const std::string& path) {
  const std::size_t width = table.columns.size();
  if (cells.size() != width)
    throw SpecError(path, line_where(line),
                    "expected " + std::to_string(width) + " cells, got " + std::to_string(cells.size()));
  for (std::size_t c = 0; c < width; ++c) {
    if (kinds[c] == CellKind::kNumber) {
      table.values.push_back(parse_cell(cells[c], path, line, table.columns[c]));
      continue;
    }
    if (kinds[c] == CellKind::kSkipped) {
      table.values.push_back(std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    float value = 0.0f;
    bool out_of_range = false;
    table.values.push_back(parse_number(cells[c], value, out_of_range) ? value
                                                                       : std::numeric_limits<float>::quiet_NaN());
    table.text[c].push_back(std::move(cells[c]));
  }
  table.row_lines.push_back(line);
}

}  // namespace

int CsvTable::column_index(const std::string& name) const {
  for (std::size_t i = 0; i < columns.size(); ++i)
    if (columns[i] == name) return static_cast<int>(i);
  return -1;
}

CsvTable read_csv(const std::string& path, const CsvOptions& options) {
  const std::string text = read_text(path, options);
  Records records(without_bom(text), path);
  if (!records.next()) {
    throw SpecError(
        path, line_where(1),
        options.header ? "empty file: expected a header row of column names" : "empty file: expected rows of cells");
  }
  CsvTable table;
  if (options.header) {
    table.columns = header_columns(records.cells(), path);
    if (!records.next()) throw SpecError(path, line_where(records.line() + 1), "no data rows after the header");
  } else {
    for (std::size_t c = 0; c < records.cells().size(); ++c) table.columns.push_back(std::to_string(c + 1));
  }
  const std::vector<CellKind> kinds = column_kinds(table, options);
  table.text.resize(table.columns.size());
  do {
    append_row(table, records.cells(), kinds, records.line(), path);
  } while (records.next());
  table.rows = static_cast<std::int64_t>(table.row_lines.size());
  return table;
}

std::string not_utf8_message(const std::string& what, std::string_view text, std::size_t at) {
  return fmt::format(
      "{} {} holds the byte 0x{:02x} at offset {}, which is not UTF-8; the run records it in its JSON files, which "
      "hold UTF-8 text only",
      what, quote_for_message(text), static_cast<unsigned char>(text[at]), at);
}

std::string csv_field(std::string_view cell) {
  const bool plain = cell.find_first_of(",\"\r\n") == std::string_view::npos &&
                     (cell.empty() || (!is_space(cell.front()) && !is_space(cell.back())));
  if (plain) return std::string(cell);
  std::string out = "\"";
  for (char c : cell) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

}  // namespace tctl
