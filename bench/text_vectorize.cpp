// Vectorizing text as a run's data does (models/data/text_vectorizer.h): the rows of a CSV's text column
// standardized (lower_and_strip_punctuation), split on whitespace and looked up in a vocabulary fitted on
// them (20,000 tokens at most), 64 ids a row, on one thread. Prints the best of 5 passes in rows/s and MB/s;
// bench/text_vectorize.sh runs it beside tests/onnx/text_vectorize.py, the Python reference, on the same file.
//
// Usage: bench_text_vectorize [CSV [COLUMN]]   default configs/data/fortunes.csv, column "text"
#include <chrono>
#include <string>

#include <fmt/format.h>

#include "bench/bench_util.h"
#include "models/data/csv.h"
#include "models/data/text_vectorizer.h"

using namespace tctl;

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : std::string(TENSORCTL_SOURCE_DIR) + "/configs/data/fortunes.csv";
  const std::string column = argc > 2 ? argv[2] : "text";
  const CsvTable table =
      read_csv(path, CsvOptions{.header = true, .text_columns = {column}, .number_columns = {column}});
  const int c = table.column_index(column);
  if (c < 0) {
    fmt::print(stderr, "{}: no column \"{}\"\n", path, column);
    return 2;
  }
  const std::vector<std::string>& texts = table.text[static_cast<std::size_t>(c)];
  double bytes = 0.0;
  for (const auto& t : texts) bytes += static_cast<double>(t.size());
  TextOptions options;
  options.max_tokens = 20000;
  options.output_sequence_length = 64;
  auto start = std::chrono::steady_clock::now();
  const TextVectorizer v = TextVectorizer::fit(options, texts);
  const double fit_seconds = bench::seconds_since(start);
  double best = 1e30;
  for (int pass = 0; pass < 5; ++pass) {
    start = std::chrono::steady_clock::now();
    const Tensor ids = v.vectorize(texts);
    best = std::min(best, bench::seconds_since(start));
    if (ids.num_elements() == 0) fmt::print("");  // keeps the pass from being optimized away
  }
  fmt::print(
      "tensorctl: {} rows ({:.2f} MB), {} tokens in the vocabulary (fitted in {:.1f} ms): {:.0f} rows/s, "
      "{:.1f} MB/s on one thread\n",
      texts.size(), bytes / 1e6, v.vocabulary().size(), fit_seconds * 1e3, static_cast<double>(texts.size()) / best,
      bytes / 1e6 / best);
  return 0;
}
