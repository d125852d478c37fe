#include "models/data/csv.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <unordered_set>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/read_whole.h"
#include "core/thread_pool.h"

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
// quotes may hold both and doubles its quotes. Keeps the line count, which quoted line breaks advance. Cells
// are views: into the text, or for a quoted cell (its quotes undone) into storage of the tokenizer's own,
// valid until the next record: no copy of a plain cell (bench/csv_load.sh).
class Tokenizer {
 public:
  Tokenizer(std::string_view text, const std::string& path, std::int64_t first_line = 1)
      : text_(text), path_(path), line_(first_line), record_line_(first_line) {}

  // Reads the next record into `cells`; false at the end of the text. `blank` is set when the record is one
  // empty, unquoted cell: a line holding nothing but spaces.
  bool next(std::vector<std::string_view>& cells, bool& blank) {
    if (pos_ >= text_.size()) return false;
    record_line_ = line_;
    spans_.clear();
    unquoted_.clear();
    blank = true;
    while (true) {
      while (pos_ < text_.size() && is_space(text_[pos_])) ++pos_;
      if (pos_ < text_.size() && text_[pos_] == '"') {
        const std::size_t at = unquoted_.size();
        read_quoted(spans_.size() + 1);
        spans_.push_back({true, at, unquoted_.size() - at});
        blank = false;
      } else {
        const std::size_t start = pos_;
        const std::size_t end = line_end();
        const void* comma = std::memchr(text_.data() + pos_, ',', end - pos_);
        pos_ = comma ? static_cast<std::size_t>(static_cast<const char*>(comma) - text_.data()) : end;
        std::string_view raw = text_.substr(start, pos_ - start);
        if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
        raw = trim(raw);
        spans_.push_back({false, static_cast<std::size_t>(raw.data() - text_.data()), raw.size()});
        if (!raw.empty()) blank = false;
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
    cells.resize(spans_.size());
    for (std::size_t i = 0; i < spans_.size(); ++i)
      cells[i] = std::string_view(spans_[i].quoted ? unquoted_ : text_).substr(spans_[i].at, spans_[i].size);
    return true;
  }

  std::int64_t record_line() const { return record_line_; }
  // Where the next record starts, and its line.
  std::size_t pos() const { return pos_; }
  std::int64_t line() const { return line_; }

 private:
  struct Span {
    bool quoted;  // in unquoted_, else in text_
    std::size_t at, size;
  };

  // The first line break at or after pos_ (or the text's end), found once per line rather than per cell.
  std::size_t line_end() {
    if (line_end_ < pos_ || line_end_ == std::string_view::npos) {
      const void* at = std::memchr(text_.data() + pos_, '\n', text_.size() - pos_);
      line_end_ = at ? static_cast<std::size_t>(static_cast<const char*>(at) - text_.data()) : text_.size();
    }
    return line_end_;
  }

  // The cell starting at the opening quote at pos_, appended to unquoted_; leaves pos_ at the ',' or line
  // end after it.
  void read_quoted(std::size_t number) {
    const std::int64_t opened = line_;
    ++pos_;
    while (true) {
      if (pos_ >= text_.size())
        throw SpecError(path_, line_where(opened),
                        "cell " + std::to_string(number) + ": the quote opened here never closes");
      const char c = text_[pos_++];
      if (c == '"') {
        if (pos_ < text_.size() && text_[pos_] == '"') {
          unquoted_ += '"';
          ++pos_;
          continue;
        }
        break;
      }
      if (c == '\n') ++line_;
      unquoted_ += c;
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
  std::size_t line_end_ = std::string_view::npos;
  std::vector<Span> spans_;
  std::string unquoted_;
};

// The cell as a finite float; false when it is not one (out of float range included).
bool parse_number(std::string_view text, float& value, bool& out_of_range) {
  text = trim(text);
  out_of_range = false;
  // Whole numbers of up to 7 digits (pixels, counts, class ids: most cells of a numeric table) are exact in a
  // float: summed here, the value from_chars gives (-0 included), in a fraction of its time
  // (bench/csv_load.sh; figures in bench/README.md).
  if (const bool minus = !text.empty() && text.front() == '-';
      text.size() > static_cast<std::size_t>(minus) && text.size() <= 7 + static_cast<std::size_t>(minus)) {
    std::uint32_t whole = 0;
    bool digits = true;
    for (std::size_t i = minus ? 1 : 0; i < text.size() && digits; ++i) {
      const auto d = static_cast<unsigned char>(text[i] - '0');
      digits = d <= 9;
      whole = whole * 10 + d;
    }
    if (digits) {
      value = minus ? -static_cast<float>(whole) : static_cast<float>(whole);
      return true;
    }
  }
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

float parse_cell(std::string_view text, const std::string& path, std::int64_t line, const std::string& column) {
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

// What a first pass over the text found: the bytes it holds when the file cannot be read again (standard
// input, a pipe), and an upper bound on its records (its line breaks, plus one).
struct Scanned {
  bool in_memory = false;
  std::string text;
  std::int64_t bytes = 0;
  std::int64_t line_breaks = 0;
};

bool can_read_again(const std::string& path) {
  struct stat st {};
  return path != "-" && ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The first pass over the file, at most max_bytes (0: a quarter of memory): a chunk at a time, checked as it
// comes, nothing kept of a regular file (which the second pass reads again, a block at a time). No text holds
// a NUL byte, so binary data (/dev/urandom, a compressed or UTF-16 file) is refused at the first chunk holding
// one, and text past the limit (a stream that never ends) at the chunk that crosses it; neither is read to its
// end or until memory runs out. The header row goes to options.check_header as soon as it is whole.
Scanned scan_text(const std::string& path, const CsvOptions& options) {
  std::size_t max_bytes = options.max_bytes;
  const bool quarter = max_bytes == 0;
  if (quarter) max_bytes = quarter_of_memory();
  Scanned out;
  out.in_memory = !can_read_again(path);
  std::size_t bytes_before = 0;
  // The header row ends at the first line break outside quotes; each chunk is scanned once.
  bool header_seen = !options.header || !options.check_header;
  bool in_quotes = false;
  std::string header;
  auto check_header = [&](std::string_view got) {
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (got[i] == '"') in_quotes = !in_quotes;
      if (got[i] != '\n' || in_quotes) continue;
      header_seen = true;
      header.append(got.substr(0, i + 1));
      Tokenizer tokens(without_bom(header), path);
      std::vector<std::string_view> cells;
      bool blank = false;
      if (tokens.next(cells, blank) && !blank)
        options.check_header(std::vector<std::string>(cells.begin(), cells.end()));
      return;
    }
    header.append(got);
  };
  // "-" is standard input, as --output - is standard output; messages still name it "-".
  out.text = read_whole(
      path == "-" ? std::filesystem::path("/dev/stdin") : std::filesystem::path(path), path,
      {.max_bytes = max_bytes,
       .keep = out.in_memory,
       .inspect =
           [&](std::string_view got, const std::string&) {
             // Binary data first: its bytes are no header.
             const std::size_t nul = got.find('\0');
             if (nul == std::string_view::npos) {
               if (!header_seen) check_header(got);
               out.line_breaks += std::count(got.begin(), got.end(), '\n');
               bytes_before += got.size();
               out.bytes = static_cast<std::int64_t>(bytes_before);
               return;
             }
             const std::int64_t line =
                 1 + out.line_breaks + std::count(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(nul), '\n');
             throw SpecError(
                 path, line_where(line),
                 "byte " + std::to_string(bytes_before + nul + 1) +
                     " is a NUL byte, which no CSV text holds: this is binary data (or UTF-16 text: save it "
                     "as UTF-8)");
           },
       .too_large =
           [&](const char*) {
             const std::string reason = quarter ? "a quarter of this machine's memory" : options.max_bytes_reason;
             return "larger than " + byte_size(max_bytes) + (reason.empty() ? "" : " (" + reason + ")") +
                    ", the most a CSV file may hold here: it is read whole before it is parsed";
           }});
  return out;
}

// The records of the text that are not blank lines. Blank lines at the end are fine; a blank line followed
// by more data is a broken file. `pending_blank`: the line of a blank line just before the text, 0 for none.
class Records {
 public:
  Records(std::string_view text, const std::string& path, std::int64_t first_line = 1, std::int64_t pending_blank = 0)
      : tokens_(text, path, first_line), path_(path), first_blank_(pending_blank) {}

  // Reads the next record that is not blank into cells(); false at the end of the text.
  bool next() {
    bool blank = false;
    while (tokens_.next(cells_, blank)) {
      if (!blank) {
        if (first_blank_ != 0)
          throw SpecError(path_, line_where(first_blank_), "blank line before the end of the data");
        return true;
      }
      if (first_blank_ == 0) first_blank_ = tokens_.record_line();
    }
    return false;
  }

  std::vector<std::string_view>& cells() { return cells_; }
  // The line the last record read starts on.
  std::int64_t line() const { return tokens_.record_line(); }
  // The first blank line after the last record that is not blank; 0 when there is none.
  std::int64_t first_blank() const { return first_blank_; }
  // Where the next record starts, and its line.
  std::size_t pos() const { return tokens_.pos(); }
  std::int64_t next_line() const { return tokens_.line(); }

 private:
  Tokenizer tokens_;
  const std::string& path_;
  std::vector<std::string_view> cells_;
  std::int64_t first_blank_ = 0;
};

// The column names of the header row `cells`, refused when one is empty, repeated or not UTF-8.
std::vector<std::string> header_columns(const std::vector<std::string_view>& cells, const std::string& path) {
  std::vector<std::string> columns;
  std::unordered_set<std::string_view> seen;
  for (std::string_view column : cells) {
    if (column.empty())
      throw SpecError(path, line_where(1),
                      "empty name for column " + std::to_string(columns.size() + 1) + " in the header row");
    if (!seen.insert(column).second)
      throw SpecError(path, line_where(1),
                      "column name " + quote_for_message(column) + " appears twice in the header row");
    if (const auto bad = first_non_utf8(column))
      throw SpecError(path, line_where(1),
                      not_utf8_message("column " + std::to_string(columns.size() + 1) + "'s name", column, *bad));
    columns.emplace_back(column);
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

// Where the data rows go while they are parsed: the values of at most `capacity` rows, each row's line, and
// the text cells, which each piece keeps apart until the pieces are joined in order.
struct RowSink {
  const std::vector<std::string>& columns;
  const std::vector<CellKind>& kinds;
  const std::string& path;
  float* values;
  std::int64_t* lines;
  std::int64_t capacity;
};

// One piece of the data rows' text (whole records), parsed on its own: from `first_row` on.
struct Piece {
  std::string_view source;
  std::int64_t first_line = 1;
  std::int64_t first_row = 0;
  std::int64_t pending_blank = 0;  // a blank line just before it (the piece before ended in blank lines)
  // What parsing it found.
  std::int64_t rows = 0;
  std::int64_t last_record_line = 0;            // 0: it held no record
  std::int64_t first_blank = 0;                 // a blank line after its last data row
  std::vector<std::vector<std::string>> cells;  // by column, the text cells of its rows
  std::exception_ptr error;
};

// Parses `piece` into `sink`; a SpecError is kept in piece.error, for the pieces to be reported in order.
void parse_piece(Piece& piece, const RowSink& sink) {
  piece.rows = 0;
  piece.error = nullptr;
  const std::size_t width = sink.columns.size();
  piece.cells.assign(width, {});
  try {
    Records records(piece.source, sink.path, piece.first_line, piece.pending_blank);
    while (records.next()) {
      piece.last_record_line = records.line();
      const std::int64_t row = piece.first_row + piece.rows;
      const auto& cells = records.cells();
      if (cells.size() != width)
        throw SpecError(sink.path, line_where(records.line()),
                        "expected " + std::to_string(width) + " cells, got " + std::to_string(cells.size()));
      if (row >= sink.capacity) throw RuntimeError(sink.path + ": the file changed while it was read");
      float* out = sink.values + static_cast<std::size_t>(row) * width;
      for (std::size_t c = 0; c < width; ++c) {
        if (sink.kinds[c] == CellKind::kNumber) {
          out[c] = parse_cell(cells[c], sink.path, records.line(), sink.columns[c]);
          continue;
        }
        float value = 0.0f;
        bool out_of_range = false;
        out[c] = sink.kinds[c] == CellKind::kText && parse_number(cells[c], value, out_of_range)
                     ? value
                     : std::numeric_limits<float>::quiet_NaN();
        if (sink.kinds[c] == CellKind::kText) piece.cells[c].emplace_back(cells[c]);
      }
      sink.lines[row] = records.line();
      ++piece.rows;
    }
    piece.last_record_line = std::max(piece.last_record_line, records.line());
    piece.first_blank = records.first_blank();
  } catch (...) {
    // A SpecError, or memory running out: reported in file order by join_pieces.
    piece.error = std::current_exception();
  }
}

// The data rows' text, a block at a time: the whole text when the first pass kept it, else the file read
// again in blocks of whole records, each split into pieces of whole records that parse in parallel.
class DataBlocks {
 public:
  DataBlocks(const std::string& path, Scanned& scanned, std::size_t block_bytes)
      : scanned_(scanned), block_bytes_(block_bytes) {
    if (scanned.in_memory) return;
    file_.reset(std::fopen(path.c_str(), "rbe"));
    if (!file_) throw SpecError(path, "", std::string("cannot open file: ") + std::strerror(errno));
  }

  // The next block of whole records, at least one, after the `consumed` bytes of the last; empty at the end.
  std::string_view next(std::size_t consumed) {
    if (scanned_.in_memory) {
      const std::string_view all = without_bom(scanned_.text);
      if (given_) return {};
      given_ = true;
      return all;
    }
    buffer_.erase(0, consumed);
    while (!eof_) {
      // No more than the first pass saw, and a byte to find the end: a small file costs no 8 MB block (each
      // resize fills what it adds; the CSV fuzzer ran 40x slower so).
      const std::size_t want =
          std::min(block_bytes_, static_cast<std::size_t>(scanned_.bytes) -
                                     std::min(read_, static_cast<std::size_t>(scanned_.bytes)) + 1);
      const std::size_t had = buffer_.size();
      buffer_.resize(had + want);
      const std::size_t n = std::fread(buffer_.data() + had, 1, want, file_.get());
      buffer_.resize(had + n);
      read_ += n;
      if (n < want) eof_ = true;
      if (first_) {
        first_ = false;
        if (buffer_.starts_with("\xEF\xBB\xBF")) buffer_.erase(0, 3);
      }
      const std::size_t end = whole_records(buffer_);
      if (end > 0 && !eof_) return std::string_view(buffer_).substr(0, end);
    }
    return buffer_;
  }

  // Where the text's last whole record ends (just after its line break), by the tokenizer's rules: a quote
  // opens a quoted cell only at a cell's start. 0 when no record ends in it.
  static std::size_t whole_records(std::string_view text) {
    if (text.find('"') == std::string_view::npos) {
      const std::size_t last = text.rfind('\n');
      return last == std::string_view::npos ? 0 : last + 1;
    }
    return scan_records(text).last_end;
  }

  // How many records end in the text (at line breaks outside quoted cells).
  static std::int64_t record_ends(std::string_view text) { return scan_records(text).ends; }

 private:
  struct RecordScan {
    std::size_t last_end = 0;
    std::int64_t ends = 0;
  };

  // The tokenizer's view of where records end, without tokenizing: a state per byte.
  static RecordScan scan_records(std::string_view text) {
    RecordScan out;
    enum { kCellStart, kPlain, kQuoted, kQuoteSeen } state = kCellStart;
    auto record_end = [&](std::size_t i) {
      out.last_end = i + 1;
      ++out.ends;
      state = kCellStart;
    };
    for (std::size_t i = 0; i < text.size(); ++i) {
      const char c = text[i];
      switch (state) {
        case kCellStart:
          if (c == '"')
            state = kQuoted;
          else if (c == '\n')
            record_end(i);
          else if (c != ',' && !is_space(c))
            state = kPlain;
          break;
        case kQuoted:
          if (c == '"') state = kQuoteSeen;
          break;
        case kQuoteSeen:
          if (c == '"') {
            state = kQuoted;
            break;
          }
          [[fallthrough]];
        case kPlain:
          if (c == ',')
            state = kCellStart;
          else if (c == '\n')
            record_end(i);
          else
            state = kPlain;
          break;
      }
    }
    return out;
  }

 private:
  Scanned& scanned_;
  std::size_t block_bytes_;
  std::size_t read_ = 0;  // bytes of the file read so far
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_{nullptr, &std::fclose};
  std::string buffer_;
  bool eof_ = false, first_ = true, given_ = false;
};

// `text` (whole records) cut into about `count` pieces at record ends.
std::vector<std::string_view> cut_pieces(std::string_view text, int count) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (int i = 1; i <= count && start < text.size(); ++i) {
    std::size_t end = text.size();
    if (i < count) {
      const std::size_t target =
          std::max(start, text.size() / static_cast<std::size_t>(count) * static_cast<std::size_t>(i));
      end = DataBlocks::whole_records(text.substr(0, target));
      // A record that spans the target: the piece ends after it instead.
      if (end <= start) {
        const std::size_t after = DataBlocks::whole_records(text.substr(0, std::min(text.size(), target + (1 << 16))));
        end = after > start ? after : text.size();
      }
    }
    out.push_back(text.substr(start, end - start));
    start = end;
  }
  return out;
}
// How many records `text` (whole records, but for the last at the end of the file) holds, blank ones included:
// its line breaks outside quoted cells, by the tokenizer's rules, and an unfinished last line.
std::int64_t count_records(std::string_view text) {
  if (text.empty()) return 0;
  const std::int64_t ends = text.find('"') == std::string_view::npos ? std::count(text.begin(), text.end(), '\n')
                                                                     : DataBlocks::record_ends(text);
  return ends + (text.back() == '\n' ? 0 : 1);
}

// Joins the parsed pieces into the table in file order, throwing the first error any of them met. A piece
// after one that ended in blank lines is parsed again knowing it, so a blank line before more data is
// refused exactly as a reader of the whole text would.
void join_pieces(std::vector<Piece>& pieces, const RowSink& sink, CsvTable& table, std::int64_t& pending_blank,
                 std::int64_t& last_line) {
  for (Piece& piece : pieces) {
    if (pending_blank != 0) {
      piece.pending_blank = pending_blank;
      parse_piece(piece, sink);
    }
    if (piece.error) std::rethrow_exception(piece.error);
    last_line = std::max(last_line, piece.last_record_line);
    if (piece.rows > 0 || piece.first_blank != 0) pending_blank = piece.first_blank;
    for (std::size_t c = 0; c < piece.cells.size(); ++c)
      std::move(piece.cells[c].begin(), piece.cells[c].end(), std::back_inserter(table.text[c]));
    table.rows += piece.rows;
  }
}

// Parses blocks of whole records in pieces on a pool of threads, joining them in file order.
struct ParallelParse {
  int threads;
  std::size_t piece_bytes;
  std::int64_t line = 1;           // of the next block's first record
  std::int64_t last_line = 0;      // of the last record parsed, blank or not
  std::int64_t pending_blank = 0;  // a blank line at the end of the last block
  std::optional<ThreadPool> pool;

  void block(std::string_view text, const RowSink& sink, CsvTable& table) {
    // Pieces of at least piece_bytes each: a few rows are parsed where they are.
    const auto count =
        static_cast<int>(std::clamp<std::size_t>(text.size() / piece_bytes, 1, static_cast<std::size_t>(threads)));
    std::vector<Piece> pieces;
    std::int64_t row = table.rows;
    for (std::string_view cut : cut_pieces(text, count)) {
      Piece& piece = pieces.emplace_back();
      piece.source = cut;
      piece.first_line = line;
      piece.first_row = row;
      line += std::count(cut.begin(), cut.end(), '\n');
      row += count_records(cut);
    }
    if (pieces.size() == 1) {
      parse_piece(pieces[0], sink);
    } else {
      if (!pool) pool.emplace(threads);
      pool->parallel_for(static_cast<std::int64_t>(pieces.size()), 1, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) parse_piece(pieces[static_cast<std::size_t>(i)], sink);
      });
    }
    join_pieces(pieces, sink, table, pending_blank, last_line);
  }
};

}  // namespace

int CsvTable::column_index(const std::string& name) const {
  for (std::size_t i = 0; i < columns.size(); ++i)
    if (columns[i] == name) return static_cast<int>(i);
  return -1;
}

namespace {

// The header row (or the column names "1".."N") from the first block, and where its data rows start.
struct TableStart {
  std::size_t start = 0;  // of the data rows in the first block
  std::int64_t line = 1, last_line = 0;
};
TableStart start_table(std::string_view block, const std::string& path, const CsvOptions& options, CsvTable& table) {
  Records first(block, path);
  if (!first.next()) {
    throw SpecError(
        path, line_where(1),
        options.header ? "empty file: expected a header row of column names" : "empty file: expected rows of cells");
  }
  TableStart out;
  if (options.header) {
    table.columns = header_columns(first.cells(), path);
    out.start = first.pos();
    out.line = first.next_line();
    out.last_line = first.line();
  } else {
    for (std::size_t c = 0; c < first.cells().size(); ++c) table.columns.push_back(std::to_string(c + 1));
  }
  table.text.resize(table.columns.size());
  return out;
}

}  // namespace

CsvTable read_csv(const std::string& path, const CsvOptions& options) {
  Scanned scanned = scan_text(path, options);
  const std::size_t piece_bytes = std::max<std::size_t>(options.piece_bytes, 1);
  DataBlocks blocks(path, scanned, 8 * piece_bytes);
  std::string_view block = blocks.next(0);
  CsvTable table;
  const TableStart at = start_table(block, path, options, table);
  const std::vector<CellKind> kinds = column_kinds(table, options);
  const auto width = static_cast<std::int64_t>(table.columns.size());
  // Room for every row the text can hold: one per line, and no more than a row of `width` cells (width - 1
  // commas and a line break) per `width` bytes.
  const std::int64_t capacity = std::min(scanned.line_breaks + 1, scanned.bytes / width + 1);
  Tensor values = Tensor::empty(DType::kF32, Shape{capacity, width});
  table.row_lines.resize(static_cast<std::size_t>(capacity));
  const RowSink sink{table.columns, kinds, path, values.mutable_data<float>(), table.row_lines.data(), capacity};
  ParallelParse parse{options.threads > 0 ? options.threads : ThreadPool::hardware_threads(), piece_bytes};
  parse.line = at.line;
  parse.last_line = at.last_line;
  for (std::string_view text = block.substr(at.start);; text = block) {
    if (!text.empty()) parse.block(text, sink, table);
    block = blocks.next(block.size());
    if (block.empty()) break;
  }
  if (table.rows == 0) throw SpecError(path, line_where(parse.last_line + 1), "no data rows after the header");
  table.row_lines.resize(static_cast<std::size_t>(table.rows));
  table.values = values.prefix(Shape{table.rows, width});
  table.values.release_unseen();
  return table;
}

namespace {

// Binary data is refused at the block holding it, as the whole-file reader refuses it at its chunk. `line`: the
// block's first.
void refuse_nul(std::string_view text, const std::string& path, std::int64_t line) {
  const std::size_t nul = text.find('\0');
  if (nul == std::string_view::npos) return;
  throw SpecError(path,
                  line_where(line + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(nul), '\n')),
                  "a NUL byte, which no CSV text holds: this is binary data (or UTF-16 text: save it as UTF-8)");
}

}  // namespace

void read_csv_blocks(const std::string& path, const CsvOptions& options,
                     FunctionRef<void(const std::vector<std::string>& columns)> on_header,
                     FunctionRef<void(CsvTable& block)> use) {
  struct stat st {};
  if (path == "-" || ::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    throw SpecError(path, "", "streaming reads a regular file, which this is not");
  Scanned scanned;
  scanned.bytes = static_cast<std::int64_t>(st.st_size);
  const std::size_t piece_bytes = std::max<std::size_t>(options.piece_bytes, 1);
  DataBlocks blocks(path, scanned, 8 * piece_bytes);
  std::string_view block = blocks.next(0);
  refuse_nul(block, path, 1);  // the header's too, before its names are read
  CsvTable header;
  const TableStart at = start_table(block, path, options, header);
  on_header(header.columns);
  const std::vector<CellKind> kinds = column_kinds(header, options);
  const auto width = static_cast<std::int64_t>(header.columns.size());
  ParallelParse parse{options.threads > 0 ? options.threads : ThreadPool::hardware_threads(), piece_bytes};
  parse.line = at.line;
  parse.last_line = at.last_line;
  std::int64_t rows = 0;
  Tensor values;
  for (std::string_view text = block.substr(at.start);; text = block) {
    refuse_nul(text, path, parse.line);
    if (!text.empty()) {
      CsvTable part;
      part.columns = header.columns;
      part.text.resize(header.columns.size());
      const std::int64_t capacity = std::count(text.begin(), text.end(), '\n') + 1;
      // The buffer of the block before is refilled when its user let go of it.
      if (!values.defined() || !values.unique() || values.shape()[0] < capacity)
        values = Tensor::empty(DType::kF32, Shape{capacity, width});
      part.row_lines.resize(static_cast<std::size_t>(capacity));
      const RowSink sink{part.columns, kinds, path, values.mutable_data<float>(), part.row_lines.data(), capacity};
      parse.block(text, sink, part);
      part.row_lines.resize(static_cast<std::size_t>(part.rows));
      part.values = values.leading_rows(part.rows);
      rows += part.rows;
      if (part.rows > 0) use(part);
    }
    block = blocks.next(block.size());
    if (block.empty()) break;
  }
  if (rows == 0) throw SpecError(path, line_where(parse.last_line + 1), "no data rows after the header");
}

std::string not_utf8_message(const std::string& what, std::string_view text, std::size_t at) {
  return fmt::format(
      "{} {} holds the byte 0x{:02x} at offset {}, which is not UTF-8; the run records it in its JSON files, which "
      "hold UTF-8 text only",
      what, quote_for_message(text), static_cast<unsigned char>(text[at]), at);
}

void check_text_column_utf8(const CsvTable& table, int column, const std::string& path) {
  for (std::int64_t r = 0; r < table.rows; ++r)
    if (const auto bad = first_non_utf8(table.text_at(r, column)))
      throw SpecError(path, "line " + std::to_string(table.row_lines[static_cast<std::size_t>(r)]),
                      not_utf8_message(
                          "column " + quote_for_message(table.columns[static_cast<std::size_t>(column)]) + ": the text",
                          table.text_at(r, column), *bad));
}

void append_csv_float(std::string& out, float v) {
  char digits[32];
  // A whole number below 2^24 in magnitude (pixels, class ids, counts: most cells of a test.csv) as the
  // integer it is, which is what the shortest digits are too, by the cheaper conversion (bench/csv_load.sh).
  if (std::abs(v) < 16777216.0f && v == std::trunc(v)) {
    if (std::signbit(v)) out += '-';
    const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, static_cast<std::int32_t>(std::abs(v)));
    out.append(digits, end);
    return;
  }
  const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, v);
  out.append(digits, end);
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
