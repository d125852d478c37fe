// Tables that fit the terminal (app/terminal.h): padding, narrowed columns, cut text and left-out columns,
// each tried only when the one before was not enough.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "app/terminal.h"

using namespace tctl::app;

namespace {

std::size_t code_points(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    out.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return out;
}

std::size_t widest_line(const std::string& text) {
  std::size_t w = 0;
  for (const auto& l : lines(text)) w = std::max(w, code_points(l));
  return w;
}

const std::vector<TableColumn> kColumns{{"name"},
                                        {"time ms [min-max]", true, 0, " ["},
                                        {"count", true, 2},
                                        {"rate", true, 1},
                                        {"verdict", false, 0, "", 12}};
const std::vector<std::vector<std::string>> kRows{
    {"first", "1.000 [0.900-1.100]", "1,000", "52.1", "consistent"},
    {"second_and_longer", "12.500 [12.000-14.000]", "20", "3.9", "consistent, no lock: each replica its own copy"}};

}  // namespace

TEST_CASE("fit_table: without a limit, or when it fits, the table is box_table's") {
  std::vector<std::string> header;
  std::vector<bool> right;
  for (const auto& c : kColumns) {
    header.push_back(c.header);
    right.push_back(c.right_aligned);
  }
  const std::string full = box_table(header, kRows, right);
  CHECK(fit_table(kColumns, kRows, 0).text == full);
  CHECK(fit_table(kColumns, kRows, widest_line(full)).text == full);
  CHECK(fit_table(kColumns, kRows, widest_line(full)).left_out.empty());
}

TEST_CASE("fit_table: each step only when the one before is not enough, and every line within the width") {
  const std::size_t full = widest_line(fit_table(kColumns, kRows, 0).text);
  // Less padding (2 spaces less per column) is the first step: nothing narrowed or left out.
  FittedTable t = fit_table(kColumns, kRows, full - 10);
  CHECK(widest_line(t.text) == full - 10);
  CHECK(t.text.find("[0.900-1.100]") != std::string::npos);
  CHECK(t.left_out.empty());

  // Then the ranges go, then the verdict is cut (to no fewer than 12), and nothing is left out yet.
  t = fit_table(kColumns, kRows, 80);
  CHECK(widest_line(t.text) <= 80);
  CHECK(t.text.find("[0.900-1.100]") == std::string::npos);
  CHECK(t.text.find(" time ms ") != std::string::npos);
  CHECK(t.text.find(" 12.500 ") != std::string::npos);
  CHECK(t.text.find("consistent, no lock: each repl… │") != std::string::npos);  // 46 - 15 over
  CHECK(t.left_out.empty());

  // Then columns by rank, highest first ("count" before "rate"), named in table order.
  t = fit_table(kColumns, kRows, 60);
  CHECK(widest_line(t.text) <= 60);
  CHECK(t.left_out == std::vector<std::string>{"count"});
  t = fit_table(kColumns, kRows, 50);
  CHECK(widest_line(t.text) <= 50);
  CHECK(t.left_out == std::vector<std::string>{"count", "rate"});
  CHECK(t.text.find("52.1") == std::string::npos);

  // Columns of rank 0 stay; last, the widest left-aligned column is cut to fit, never below 8.
  t = fit_table(kColumns, kRows, 40);
  CHECK(widest_line(t.text) <= 40);
  CHECK(t.left_out.size() == 2);
  CHECK(t.text.find("second_and_longer") == std::string::npos);
  CHECK(t.text.find("…") != std::string::npos);
  CHECK(t.text.find(" first ") != std::string::npos);
}

TEST_CASE("output_width reads COLUMNS, and is no limit for piped output without it") {
  const char* saved = std::getenv("COLUMNS");
  const std::string before = saved ? saved : "";
  setenv("COLUMNS", "72", 1);
  CHECK(output_width() == 72);
  setenv("COLUMNS", "wide", 1);
  CHECK(output_width() == 0);  // not a number: the terminal's, and doctest's stdout is no terminal here
  setenv("COLUMNS", "0", 1);
  CHECK(output_width() == 0);
  unsetenv("COLUMNS");
  CHECK(output_width() == 0);
  if (saved) setenv("COLUMNS", before.c_str(), 1);
}
