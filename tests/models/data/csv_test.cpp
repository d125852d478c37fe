#include "models/data/csv.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "core/errors.h"
#include "models/test_files.h"
#include "spec_error_check.h"

namespace fs = std::filesystem;
using tctl::CsvTable;
using tctl::read_csv;
using tctl::SpecError;

namespace {

using tctl::testing::scratch_dir;
using tctl::testing::write_scratch_file;

// Reads `path`, expecting a SpecError; returns it so the test can look at every part.
SpecError read_error(const std::string& path, const tctl::CsvOptions& options = {}) {
  INFO("reading " << path);
  return tctl::testing::catch_spec_error([&] { read_csv(path, options); });
}

}  // namespace

TEST_CASE("read_csv reads a header and numeric rows") {
  const std::string path = write_scratch_file("good.csv", "a,b,c\n1,2.5,-3\n4e2, +5 ,0.125\n");
  CsvTable t = read_csv(path);
  REQUIRE(t.columns == std::vector<std::string>{"a", "b", "c"});
  CHECK(t.rows == 2);
  CHECK(t.values.to_floats() == std::vector<float>{1.0f, 2.5f, -3.0f, 400.0f, 5.0f, 0.125f});
  CHECK(t.row_lines == std::vector<std::int64_t>{2, 3});
  CHECK(t.at(1, 2) == 0.125f);
  CHECK(t.column_index("b") == 1);
  CHECK(t.column_index("z") == -1);
}

TEST_CASE("read_csv accepts CRLF, no final newline, blank trailing lines, quotes and a BOM") {
  CsvTable crlf = read_csv(write_scratch_file("crlf.csv", "x,y\r\n1,2\r\n3,4\r\n\r\n\r\n"));
  CHECK(crlf.columns == std::vector<std::string>{"x", "y"});
  CHECK(crlf.rows == 2);
  CHECK(crlf.values.to_floats() == std::vector<float>{1, 2, 3, 4});

  CsvTable no_newline = read_csv(write_scratch_file("nonl.csv", "x\n7"));
  CHECK(no_newline.rows == 1);
  CHECK(no_newline.values.to_floats() == std::vector<float>{7});

  CsvTable quoted = read_csv(write_scratch_file("quoted.csv", "\xEF\xBB\xBF\"x\",\"y\"\n\"1\",2\n"));
  CHECK(quoted.columns == std::vector<std::string>{"x", "y"});
  CHECK(quoted.values.to_floats() == std::vector<float>{1, 2});
}

TEST_CASE("read_csv reports a missing file") {
  const std::string path = (scratch_dir() / "does_not_exist.csv").string();
  SpecError e = read_error(path);
  CHECK(e.file() == path);
  CHECK(std::string(e.what()).find("cannot open file") != std::string::npos);
  CHECK(std::string(e.what()).find(path) != std::string::npos);
}

TEST_CASE("read_csv reports a directory as a file it cannot read") {
  const std::string path = scratch_dir().string();
  SpecError e = read_error(path);
  CHECK(e.file() == path);
  CHECK(e.message() == "cannot read file: Is a directory");
}

// Found by tests/fuzz/train_config_fuzz in load_train_config: read_csv once made the same std::filesystem calls,
// which throw filesystem_error for a name the file system refuses rather than answer "no".
TEST_CASE("read_csv reports a file name that is too long") {
  const std::string path = (scratch_dir() / (std::string(300, 'a') + ".csv")).string();
  SpecError e = read_error(path);
  CHECK(e.file() == path);
  CHECK(e.where() == "");
  CHECK(e.message() == "cannot open file: File name too long");
}

// Binary data was read to its end (a device without one until memory ran out, exit 1) and then parsed.
TEST_CASE("read_csv refuses binary data at its first NUL byte, naming the line and the byte") {
  SpecError e = read_error(write_scratch_file("nul.csv", std::string("a,b\n1,2\n3,\0\x01\xff\n", 12)));
  CHECK(e.where() == "line 3");
  CHECK(e.message() ==
        "byte 11 is a NUL byte, which no CSV text holds: this is binary data (or UTF-16 text: save it as UTF-8)");
  // UTF-16, as Excel's "Unicode text" writes it: a NUL after each ASCII character.
  const std::string utf16("\xff\xfe\x61\0,\0b\0\n\0", 10);  // "a,b\n" after a byte order mark
  CHECK(read_error(write_scratch_file("utf16.csv", utf16)).where() == "line 1");
  // Past the first chunk read, the line and byte still count from the start of the file.
  std::string long_text = "a\n";
  for (int r = 0; r < 100'000; ++r) long_text += "1\n";
  SpecError late = read_error(write_scratch_file("late_nul.csv", long_text + '\0'));
  CHECK(late.where() == "line 100002");
  CHECK(late.message().starts_with("byte 200003 is a NUL byte"));
}

// A stream without end (`yes 1 | tensorctl predict ... --input /dev/stdin`) was read until memory ran out.
TEST_CASE("read_csv refuses a file past its byte limit, by default a quarter of memory") {
  std::string text = "a\n";
  for (int r = 0; r < 50'000; ++r) text += "1\n";  // 100,002 bytes: two chunks of the reader
  const std::string path = write_scratch_file("limit.csv", text);
  tctl::CsvOptions exact;
  exact.max_bytes = text.size();
  CHECK(read_csv(path, exact).rows == 50'000);
  tctl::CsvOptions less = exact;
  less.max_bytes = text.size() - 1;
  const SpecError e = read_error(path, less);
  CHECK(e.file() == path);
  CHECK(e.message() ==
        "larger than 100001 bytes, the most a CSV file may hold here: it is read whole before it is parsed");
  less.max_bytes = std::size_t{3} << 20;
  const std::string big = write_scratch_file("big.csv", std::string((std::size_t{3} << 20) + 1, '1'));
  CHECK(read_error(big, less).message().starts_with("larger than 3 MiB, the most"));
  // The default, a quarter of this machine's memory, takes the file whole.
  CHECK(read_csv(path).rows == 50'000);
}

TEST_CASE("read_csv reports an empty file and a header with no rows") {
  const std::string empty = write_scratch_file("empty.csv", "");
  SpecError e = read_error(empty);
  CHECK(e.file() == empty);
  CHECK(e.where() == "line 1");
  CHECK(e.message().find("empty file") != std::string::npos);

  SpecError blank = read_error(write_scratch_file("blank.csv", "\n\r\n  \n"));
  CHECK(blank.message().find("empty file") != std::string::npos);

  const std::string header_only = write_scratch_file("header_only.csv", "a,b\n");
  SpecError h = read_error(header_only);
  CHECK(h.where() == "line 2");
  CHECK(h.message().find("no data rows") != std::string::npos);
}

TEST_CASE("read_csv reports a ragged row with its line") {
  const std::string path = write_scratch_file("ragged.csv", "a,b,c,d,e\n1,2,3,4,5\n1,2,3,4\n");
  SpecError e = read_error(path);
  CHECK(e.file() == path);
  CHECK(e.where() == "line 3");
  CHECK(e.message() == "expected 5 cells, got 4");
  CHECK(std::string(e.what()) == path + ": line 3: expected 5 cells, got 4");
}

TEST_CASE("read_csv reads a magnitude below the smallest float as zero or a denormal, as a conversion rounds it") {
  // 1e-46 was refused as out of range while 1e-40 (a denormal) was read.
  const CsvTable t = read_csv(write_scratch_file("tiny.csv", "a\n1e-40\n1e-46\n-1e-400\n1.4e-45\n"));
  REQUIRE(t.rows == 4);
  CHECK(t.at(0, 0) == static_cast<float>(1e-40));
  CHECK(t.at(1, 0) == 0.0f);
  CHECK(t.at(2, 0) == 0.0f);
  CHECK(std::signbit(t.at(2, 0)));
  // The smallest denormal itself, unless this process flushes denormals to zero.
  CHECK(t.at(3, 0) <= std::numeric_limits<float>::denorm_min());
  CHECK(t.at(3, 0) >= 0.0f);
}

TEST_CASE("read_csv reports a non-numeric cell, naming the column and the text") {
  const std::string path = write_scratch_file("text.csv", "width,height\r\n1,2\r\n3,abc\r\n");
  SpecError e = read_error(path);
  CHECK(e.file() == path);
  CHECK(e.where() == "line 3");
  CHECK(e.message().find("\"height\"") != std::string::npos);
  CHECK(e.message().find("\"abc\"") != std::string::npos);

  CHECK(read_error(write_scratch_file("partial.csv", "a\n1.5x\n")).message().find("\"1.5x\"") != std::string::npos);
  CHECK(read_error(write_scratch_file("nan.csv", "a\nnan\n")).message().find("finite") != std::string::npos);
  CHECK(read_error(write_scratch_file("comma.csv", "a\n1,5\n")).message() == "expected 1 cells, got 2");
  CHECK(read_error(write_scratch_file("huge.csv", "a\n1e999\n")).message().find("out of range") != std::string::npos);
  CHECK(read_error(write_scratch_file("big_float.csv", "a\n-4e38\n")).message().find("out of range") !=
        std::string::npos);
  // A sign is taken once: "+-3" is no number, though strtod alone would read -3 after the '+'.
  CHECK(read_error(write_scratch_file("signs.csv", "a\n+-3\n")).message() ==
        "column \"a\": expected a finite number, got \"+-3\"");
  // A hostile cell is quoted short and escaped: a megabyte of it, or a terminal escape, never reaches stderr.
  const std::string big =
      read_error(write_scratch_file("big.csv", "a\n\"" + std::string(1 << 20, 'x') + "7\"\n")).message();
  CHECK(big == "column \"a\": expected a finite number, got \"" + std::string(100, 'x') + "\"...");
  CHECK(read_error(write_scratch_file("esc.csv", "a\n\"3\x1b[2J\"\n")).message() ==
        "column \"a\": expected a finite number, got \"3\\u001b[2J\"");
}

TEST_CASE("read_csv reports an empty cell") {
  const std::string path = write_scratch_file("empty_cell.csv", "a,b,c\n1,2,3\n4,,6\n");
  SpecError e = read_error(path);
  CHECK(e.where() == "line 3");
  CHECK(e.message() == "column \"b\": empty cell");

  SpecError trailing = read_error(write_scratch_file("trailing_comma.csv", "a,b\n1,\n"));
  CHECK(trailing.where() == "line 2");
  CHECK(trailing.message() == "column \"b\": empty cell");
}

TEST_CASE("read_csv reports bad headers and blank lines inside the data") {
  CHECK(read_error(write_scratch_file("dup.csv", "a,b,a\n1,2,3\n")).message().find("appears twice") !=
        std::string::npos);
  SpecError unnamed = read_error(write_scratch_file("unnamed.csv", "a,,c\n1,2,3\n"));
  CHECK(unnamed.where() == "line 1");
  CHECK(unnamed.message().find("column 2") != std::string::npos);
  SpecError gap = read_error(write_scratch_file("gap.csv", "a\n1\n\n2\n"));
  CHECK(gap.where() == "line 3");
}

// A wide header over many short lines once made read_csv reserve rows x columns cells before reading a row:
// 100,000 columns and 2,000,000 lines, a 4.7 MB file, asked for 800 GB (std::bad_alloc, or an abort under
// ASan). What is reserved is now bounded by what the file can hold, and the first short row is the error.
TEST_CASE("read_csv refuses a wide header over many short rows without reserving rows x columns") {
  std::string text;
  for (int c = 0; c < 100'000; ++c) text += (c ? ",c" : "c") + std::to_string(c);
  text += '\n';
  text.reserve(text.size() + 4'000'000);
  for (int r = 0; r < 2'000'000; ++r) text += "1\n";
  SpecError e = read_error(write_scratch_file("wide_and_long.csv", text));
  CHECK(e.where() == "line 2");
  CHECK(e.message() == "expected 100000 cells, got 1");
}

TEST_CASE("read_csv follows RFC 4180 quoting: commas, doubled quotes and line breaks inside quotes") {
  const std::string path = write_scratch_file("rfc4180.csv",
                                              "\"name, full\",x,\"note\"\r\n"
                                              "\"Smith, J.\",1,\"said \"\"hi\"\"\"\n"
                                              "plain , 2 ,\"two\nlines\"\n"
                                              "\"\",3,  \"padded\"  \n");
  const tctl::CsvOptions text{.header = true, .text_columns = {"name, full", "note"}, .number_columns = {}};
  CsvTable t = read_csv(path, text);
  REQUIRE(t.columns == std::vector<std::string>{"name, full", "x", "note"});
  REQUIRE(t.rows == 3);
  CHECK(t.text_at(0, 0) == "Smith, J.");
  CHECK(t.text_at(0, 2) == "said \"hi\"");
  CHECK(t.text_at(1, 0) == "plain");
  CHECK(t.text_at(1, 2) == "two\nlines");
  CHECK(t.text_at(2, 0) == "");
  CHECK(t.text_at(2, 2) == "padded");
  CHECK(t.values.to_floats()[1] == 1.0f);
  CHECK(t.at(1, 1) == 2.0f);
  CHECK(std::isnan(t.at(0, 0)));
  CHECK_FALSE(t.is_text(1));
  // The row after the quoted line break starts on line 5, and errors count lines the same way.
  CHECK(t.row_lines == std::vector<std::int64_t>{2, 3, 5});
  const tctl::CsvOptions not_note{.header = true, .text_columns = {"name, full"}, .number_columns = {}};
  const SpecError e = read_error(path, not_note);  // the note column is not numbers
  CHECK(e.where() == "line 2");
  CHECK(e.message() == "column \"note\": expected a finite number, got \"said \\\"hi\\\"\"");
}

TEST_CASE("read_csv refuses a quote that never closes and text after a closing quote, naming the line") {
  SpecError open = read_error(write_scratch_file("open_quote.csv", "a,b\n1,2\n3,\"4\n5,6\n"));
  CHECK(open.where() == "line 3");
  CHECK(open.message() == "cell 2: the quote opened here never closes");
  SpecError after = read_error(write_scratch_file("after_quote.csv", "a,b\n1,\"2\"x\n"));
  CHECK(after.where() == "line 2");
  CHECK(after.message().find("cell 2: text after the closing quote") == 0);
  // A quoted number is a number; a quote inside a plain cell is just a character.
  CHECK(read_csv(write_scratch_file("quoted_number.csv", "a\n\" 2.5 \"\n")).values.to_floats() ==
        std::vector<float>{2.5f});
  const tctl::CsvOptions text{.header = true, .text_columns = {"a"}, .number_columns = {}};
  CHECK(read_csv(write_scratch_file("inner_quote.csv", "a\n5\"\n"), text).text_at(0, 0) == "5\"");
}

TEST_CASE("read_csv without a header names the columns 1, 2, ... and reads the first line as data") {
  const tctl::CsvOptions no_header{.header = false, .text_columns = {"3"}, .number_columns = {}};
  CsvTable t = read_csv(write_scratch_file("no_header.csv", "1.5,2,setosa\n3,4,virginica\n"), no_header);
  CHECK(t.columns == std::vector<std::string>{"1", "2", "3"});
  CHECK(t.rows == 2);
  CHECK(t.row_lines == std::vector<std::int64_t>{1, 2});
  CHECK(t.at(0, 0) == 1.5f);
  CHECK(t.text_at(1, 2) == "virginica");
  CHECK(read_error(write_scratch_file("no_header_ragged.csv", "1,2\n3\n")).where() == "line 2");
}

TEST_CASE("read_csv with number_columns leaves the other columns unread") {
  const tctl::CsvOptions some{.header = true, .text_columns = {"id"}, .number_columns = {"x"}};
  CsvTable t = read_csv(write_scratch_file("some_columns.csv", "id,x,comment\nr1,1,anything at all\nr2,2,\n"), some);
  CHECK(t.at(1, 1) == 2.0f);
  CHECK(std::isnan(t.at(0, 2)));
  CHECK_FALSE(t.is_text(2));
  CHECK(t.text_at(1, 0) == "r2");
}

TEST_CASE("csv_field quotes what the reader would split or trim, and reads back unchanged") {
  CHECK(tctl::csv_field("setosa") == "setosa");
  CHECK(tctl::csv_field("") == "");
  CHECK(tctl::csv_field("a,b") == "\"a,b\"");
  CHECK(tctl::csv_field("say \"hi\"") == "\"say \"\"hi\"\"\"");
  CHECK(tctl::csv_field(" x") == "\" x\"");
  const std::vector<std::string> cells{"a,b", "say \"hi\"", " x ", "two\r\nlines", "plain"};
  std::string row;
  for (const auto& c : cells) row += (row.empty() ? "" : ",") + tctl::csv_field(c);
  std::string header = "c1,c2,c3,c4,c5";
  const tctl::CsvOptions text{.header = true, .text_columns = {"c1", "c2", "c3", "c4", "c5"}, .number_columns = {}};
  CsvTable t = read_csv(write_scratch_file("round_trip.csv", header + "\n" + row + "\n"), text);
  for (int c = 0; c < 5; ++c) CHECK(t.text_at(0, c) == cells[static_cast<std::size_t>(c)]);
}

namespace {

// A table or an error message, to compare two readings of one file.
std::string reading_of(const std::string& path, tctl::CsvOptions options) {
  try {
    const CsvTable t = read_csv(path, options);
    std::string out = "columns";
    for (const auto& c : t.columns) out += " " + c;
    out += "\nrows " + std::to_string(t.rows) + "\n";
    const std::vector<float> values = t.values.to_floats();
    for (std::size_t i = 0; i < values.size(); ++i)
      out += (std::isnan(values[i]) ? "nan" : std::to_string(values[i])) + ",";
    out += "\nlines";
    for (auto l : t.row_lines) out += " " + std::to_string(l);
    for (const auto& column : t.text)
      for (const auto& cell : column) out += "\n[" + cell + "]";
    return out;
  } catch (const tctl::SpecError& e) {
    return std::string("error: ") + e.what();
  }
}

}  // namespace

TEST_CASE("read_csv in pieces on several threads reads what one pass over the whole text reads") {
  // Pieces of a few bytes cut every file at every kind of place: inside quoted cells that span lines, at
  // blank lines, before errors, across the blocks the file is read again in. Each reading must equal the one
  // of a single piece: the same values, lines and text, or the same first error.
  const std::vector<std::string> files = {
      "a,b\n1,2\n3,4\n5,6\n7,8\n9,10\n11,12\n",
      "a,b\r\n1,2\r\n3,4\r\n5,6",
      "name,x\n\"multi\nline\",1\nplain,2\n\"with \"\"quotes\"\"\",3\n\"a,b\",4\nmid\"quote,5\n\"\n\",6\n",
      "name,x\n  \"spaced\nquote\",1\nplain,2\n\t\"tab, then\nquote\" ,3\n",
      "a,b\n1,2\n3,4\n\n\n",
      "a,b\n1,2\n\n3,4\n5,6\n",
      "a,b\n1,2\n3,4\n5,x\n7,8\n9,y\n",
      "a,b\n1,2\n3\n5,6\n",
      "a,b\n1,2\n\"3,4\n5,6\n",
      "a,b\n1,2\n3,4\n  \n",
      "\xEF\xBB\xBF"
      "a,b\n1,2\n3,4\n",
  };
  int index = 0;
  for (const std::string& text : files) {
    CAPTURE(text);
    const std::string path = write_scratch_file("pieces" + std::to_string(index++) + ".csv", text);
    const tctl::CsvOptions whole{.header = true, .text_columns = {"name"}, .number_columns = {}, .threads = 1};
    const std::string expected = reading_of(path, whole);
    for (int threads : {2, 3})
      for (std::size_t piece : {1, 3, 7, 16}) {
        tctl::CsvOptions pieces = whole;
        pieces.threads = threads;
        pieces.piece_bytes = piece;
        CAPTURE(threads);
        CAPTURE(piece);
        CHECK(reading_of(path, pieces) == expected);
      }
  }
}

TEST_CASE("read_csv reads whole numbers of up to 7 digits to the bits from_chars gives, and longer ones too") {
  const std::vector<std::string> cells = {"0",       "-0",       "7",      "-7",       "1234567", "-1234567",
                                          "9999999", "12345678", "0001",   "-0000009", "+5",      "16777217",
                                          "3.5",     "-12e2",    "1-2e0x", "00000000"};
  std::string text = "a\n";
  for (const auto& c : cells) text += c + "\n";
  // "1-2e0x" is no number: read as text, so every other cell must still parse.
  const tctl::CsvOptions options{.header = true, .text_columns = {"a"}, .number_columns = {}};
  const CsvTable t = read_csv(write_scratch_file("whole_numbers.csv", text), options);
  const std::vector<float> values = t.values.to_floats();
  REQUIRE(values.size() == cells.size());
  for (std::size_t i = 0; i < cells.size(); ++i) {
    CAPTURE(cells[i]);
    std::string_view cell = cells[i];
    if (cell.front() == '+') cell.remove_prefix(1);
    float expected = 0.0f;
    const auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), expected);
    if (ec != std::errc() || end != cell.data() + cell.size()) {
      CHECK(std::isnan(values[i]));
      continue;
    }
    CHECK(std::memcmp(&values[i], &expected, sizeof expected) == 0);
  }
}
