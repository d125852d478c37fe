// libFuzzer harness: text as a config's "data": {"text": ...} turns it into ids. The first byte picks the
// standardize and split modes, the second max_tokens, the third the length; the rest, cut at line breaks, is
// the training rows, fitted and then vectorized again. Every id must be one the vocabulary has, the vocabulary
// must pass its own check (as a run's recorded one is checked), and a row's ids are padded only at the end.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/errors.h"
#include "models/data/text_vectorizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  tctl::TextOptions options;
  options.standardize = static_cast<tctl::TextStandardize>(data[0] % 4);
  options.split = static_cast<tctl::TextSplit>((data[0] / 4) % 2);
  options.max_tokens = 2 + data[1];
  options.output_sequence_length = 1 + data[2] % 32;
  std::vector<std::string> rows;
  std::string row;
  for (std::size_t i = 3; i < size; ++i) {
    if (data[i] == '\n') {
      rows.push_back(row);
      row.clear();
    } else {
      row.push_back(static_cast<char>(data[i]));
    }
  }
  rows.push_back(row);
  const tctl::TextVectorizer v = tctl::TextVectorizer::fit(options, rows);
  TCTL_CHECK(tctl::TextVectorizer::vocabulary_problem(v.vocabulary()).empty(), "a fitted vocabulary fails its check");
  TCTL_CHECK(static_cast<std::int64_t>(v.vocabulary().size()) <= options.max_tokens, "the vocabulary is too large");
  const tctl::Tensor ids = v.vectorize(rows);
  const float* p = ids.data<float>();
  const auto vocabulary = static_cast<float>(v.vocabulary().size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    bool padding = false;
    for (std::int64_t j = 0; j < v.length(); ++j) {
      const float id = p[static_cast<std::int64_t>(r) * v.length() + j];
      TCTL_CHECK(id >= 0.0f && id < vocabulary, "an id outside the vocabulary");
      TCTL_CHECK(!padding || id == 0.0f, "a token after padding");
      padding = padding || id == 0.0f;
    }
  }
  return 0;
}
