// libFuzzer harness: a CSV data file as `train` (data.csv) and `predict`/`evaluate` read it. The input is
// written to a file in a scratch folder (read_csv takes a path), then read with and without a header row,
// with text columns, and by load_csv_dataset with a "label" column (or column "3" without a header), as a
// classification (numbers or names) and as a regression. A table read with every column as text must come
// back unchanged when written with csv_field and read again. read_csv_blocks must read what read_csv reads, and
// a streamed run's data cache (models/data/row_cache.h) hold what load_csv_dataset loads.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "models/data/csv.h"
#include "models/data/dataset.h"
#include "models/data/row_cache.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

void check_consistent(const tctl::CsvTable& table) {
  const auto width = table.columns.size();
  TCTL_CHECK(
      table.rows >= 1 &&
          static_cast<std::size_t>(table.values.num_elements()) == static_cast<std::size_t>(table.rows) * width &&
          table.row_lines.size() == static_cast<std::size_t>(table.rows) && table.text.size() == width,
      "read_csv returned an inconsistent table");
  for (const auto& column : table.text)
    TCTL_CHECK(column.empty() || column.size() == static_cast<std::size_t>(table.rows),
               "a text column has a row count of its own");
}

// Writes `table`'s text cells back as CSV and reads them again: every cell must survive.
void check_round_trip(const tctl::CsvTable& table, const tctl::fuzz::ScratchDir& scratch) {
  const std::size_t width = table.columns.size();
  // A row of one empty cell is a blank line, which the reader skips or refuses by design.
  if (width < 2) return;
  std::string text;
  for (std::size_t c = 0; c < width; ++c) text += (c ? "," : "") + tctl::csv_field(table.columns[c]);
  text += "\n";
  for (std::int64_t r = 0; r < table.rows; ++r) {
    for (std::size_t c = 0; c < width; ++c)
      text += (c ? "," : "") + tctl::csv_field(table.text_at(r, static_cast<int>(c)));
    text += "\n";
  }
  const tctl::CsvTable again =
      tctl::read_csv(scratch.write("again.csv", text),
                     tctl::CsvOptions{.header = true, .text_columns = table.columns, .number_columns = {}});
  TCTL_CHECK(again.columns == table.columns && again.rows == table.rows && again.text == table.text,
             "csv_field did not write what read_csv reads back");
}

// read_csv_blocks, in blocks of a few bytes' pieces, reads what read_csv reads, or refuses as it does.
void check_blocks(const std::string& path) {
  const tctl::CsvOptions options{.header = true, .text_columns = {"label"}, .number_columns = {}};
  std::optional<tctl::CsvTable> whole;
  tctl::fuzz::accept_refusal([&] { whole = tctl::read_csv(path, options); });
  std::vector<float> values;
  std::vector<std::int64_t> lines;
  bool read = false;
  tctl::fuzz::accept_refusal([&] {
    tctl::CsvOptions small = options;
    small.piece_bytes = 3;
    tctl::read_csv_blocks(
        path, small, [](const std::vector<std::string>&) {},
        [&](tctl::CsvTable& block) {
          values.insert(values.end(), block.values.data<float>(),
                        block.values.data<float>() + block.values.num_elements());
          lines.insert(lines.end(), block.row_lines.begin(), block.row_lines.end());
        });
    read = true;
  });
  TCTL_CHECK(read == whole.has_value(), "read_csv_blocks and read_csv disagree on whether the file is good");
  if (!whole) return;
  TCTL_CHECK(lines == whole->row_lines && values.size() == static_cast<std::size_t>(whole->values.num_elements()) &&
                 std::equal(values.begin(), values.end(), whole->values.data<float>(),
                            [](float a, float b) { return a == b || (a != a && b != b); }),
             "read_csv_blocks read other rows than read_csv");
}

// The data cache holds the data set load_csv_dataset loads (its fingerprint), or refuses the file as it does.
// `text_column`: read as a data set of texts (a config's "text"), else of numbers.
void check_cache(const std::string& path, bool classification, const std::string& text_column,
                 const tctl::fuzz::ScratchDir& scratch) {
  const tctl::CsvDataOptions options{.text_column = text_column};
  std::optional<tctl::DataFingerprint> memory;
  tctl::fuzz::accept_refusal([&] {
    memory =
        tctl::fingerprint_of(tctl::load_csv_dataset(path, "label", classification, "config.json", "data.csv", options));
  });
  std::optional<tctl::DataFingerprint> cached;
  tctl::fuzz::accept_refusal([&] {
    const tctl::RowCache::Source source = tctl::RowCache::csv_source({.path = path,
                                                                      .label_column = "label",
                                                                      .classification = classification,
                                                                      .options = options,
                                                                      .file_for_errors = "config.json",
                                                                      .where = "data.csv"});
    const std::uint64_t key = tctl::RowCache::key_of(source);
    cached = tctl::RowCache::build(scratch.write("cache.rows", ""), key, source)->fingerprint();
  });
  TCTL_CHECK(memory == cached, "the data cache holds another data set than load_csv_dataset loads");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const tctl::fuzz::ScratchDir scratch;
  const std::string path = scratch.write("data.csv", tctl::fuzz::as_text(data, size));
  tctl::fuzz::accept_refusal([&] { check_consistent(tctl::read_csv(path)); });
  tctl::fuzz::accept_refusal([&] {
    std::vector<std::string> all;
    for (int c = 1; c <= 64; ++c) all.push_back(std::to_string(c));
    const tctl::CsvTable table =
        tctl::read_csv(path, tctl::CsvOptions{.header = false, .text_columns = all, .number_columns = {}});
    check_consistent(table);
    // Columns past the 64th had to be numbers; the text ones go round.
    if (table.columns.size() <= all.size()) check_round_trip(table, scratch);
  });
  tctl::fuzz::accept_refusal([&] {
    check_consistent(
        tctl::read_csv(path, tctl::CsvOptions{.header = true, .text_columns = {"id"}, .number_columns = {"label"}}));
  });
  check_blocks(path);
  for (bool classification : {true, false}) {
    for (const char* text_column : {"", "text"}) check_cache(path, classification, text_column, scratch);
    tctl::fuzz::accept_refusal([&] {
      const tctl::CsvDataOptions options{.header = false, .named_labels = true, .classes = {"a", "b"}};
      (void)tctl::load_csv_dataset(path, "3", classification, "config.json", "data.csv", options);
    });
  }
  return 0;
}
