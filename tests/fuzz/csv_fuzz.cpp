// libFuzzer harness: a CSV data file as `train` (data.csv) and `predict`/`evaluate` read it. The input is
// written to a file in a scratch folder (read_csv takes a path), then read_csv and load_csv_dataset with a
// "label" column, as a classification and as a regression.
#include <cstddef>
#include <cstdint>

#include "models/data/csv.h"
#include "models/data/dataset.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const tctl::fuzz::ScratchDir scratch;
  const std::string path = scratch.write("data.csv", tctl::fuzz::as_text(data, size));
  tctl::fuzz::accept_refusal([&] {
    const tctl::CsvTable table = tctl::read_csv(path);
    TCTL_CHECK(table.rows >= 1 && table.values.size() == static_cast<std::size_t>(table.rows) * table.columns.size() &&
                   table.row_lines.size() == static_cast<std::size_t>(table.rows),
               "read_csv returned an inconsistent table");
  });
  for (bool classification : {true, false})
    tctl::fuzz::accept_refusal(
        [&] { (void)tctl::load_csv_dataset(path, "label", classification, "config.json", "data.csv"); });
  return 0;
}
