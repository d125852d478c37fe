// Text to token ids, as Keras' TextVectorization layer does in its "int" output mode: each row's text is
// standardized, split into tokens, and each token replaced by its index in a vocabulary learned from the
// training rows; the ids are cut or padded to a fixed length.
//
//   standardize  "lower_and_strip_punctuation" (default), "lower", "strip_punctuation" or "none". Lowering
//                maps ASCII A-Z only; the punctuation is Keras' set, the ASCII characters
//                !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~ (so "don't" becomes "dont"). Other bytes are kept.
//   split        "whitespace" (default: runs of spaces, tabs, line breaks; empty tokens dropped) or
//                "character" (every UTF-8 character, spaces included, is a token; a byte that is not UTF-8
//                is a token of its own).
//   vocabulary   id 0 is padding (""), id 1 the out-of-vocabulary token ("[UNK]"), then the training rows'
//                tokens by falling count, ties in falling byte order (as Keras' adapt), up to max_tokens ids
//                in all.
//   output       output_sequence_length ids per row: the first tokens of a longer row, a shorter row
//                followed by padding ids (0).
//
// A vectorizer is built once (fit) and then only read: vectorize() may run from many threads.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/function_ref.h"
#include "core/tensor.h"

namespace tctl {

enum class TextStandardize { kLowerAndStripPunctuation, kLower, kStripPunctuation, kNone };
enum class TextSplit { kWhitespace, kCharacter };

// The JSON spellings, as the config writes them.
std::string_view text_standardize_name(TextStandardize s);
std::string_view text_split_name(TextSplit s);
// Every spelling, in a stable order, for messages and the config reader.
const std::vector<std::string>& text_standardize_names();
const std::vector<std::string>& text_split_names();
// The value of a spelling from the lists above (checked: the config reader refuses others).
TextStandardize text_standardize_from_name(std::string_view name);
TextSplit text_split_from_name(std::string_view name);

// A train config's "data": {"text": {...}}: which CSV column holds the text and how it becomes ids.
struct TextOptions {
  std::string column = "text";
  TextStandardize standardize = TextStandardize::kLowerAndStripPunctuation;
  TextSplit split = TextSplit::kWhitespace;
  // The most ids, padding and out-of-vocabulary included; 0: the model's first layer's input_dim.
  std::int64_t max_tokens = 0;
  // Ids per row; 0: the model's input length.
  std::int64_t output_sequence_length = 0;

  nlohmann::json to_json() const;
};

// `text` standardized as `mode` says, into `out` (cleared first; reused so a loop over rows allocates once).
void standardize_text(std::string_view text, TextStandardize mode, std::string& out);
// The bytes of the UTF-8 character that starts `text` (1 for a byte that begins none, or a truncated one).
std::size_t utf8_char_length(std::string_view text);

// Calls `token(std::string_view)` with each token of `text` (already standardized), in order. A template so the
// per-token call inlines: vectorizing is a loop over every token of the corpus (bench/text_bench.cpp).
template <class F>
void split_text(std::string_view text, TextSplit mode, F&& token) {
  if (mode == TextSplit::kCharacter) {
    for (std::size_t i = 0; i < text.size();) {
      const std::size_t n = utf8_char_length(text.substr(i));
      token(text.substr(i, n));
      i += n;
    }
    return;
  }
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && space(text[i])) ++i;
    const std::size_t start = i;
    while (i < text.size() && !space(text[i])) ++i;
    if (i > start) token(text.substr(start, i - start));
  }
}

// The most ids a vocabulary may hold: ids travel as float features, and past 2^24 a float no longer holds
// every whole number.
inline constexpr std::int64_t kMaxTextTokens = std::int64_t{1} << 24;

inline constexpr std::string_view kPaddingToken = "";
inline constexpr std::string_view kOovToken = "[UNK]";

class TextVectorizer {
 public:
  TextVectorizer() = default;
  // Learns the vocabulary from `texts` (the training rows). `options.max_tokens` and
  // `output_sequence_length` must be resolved (> 0; max_tokens >= 2, checked).
  static TextVectorizer fit(const TextOptions& options, std::span<const std::string> texts);
  // The same, the texts given a part at a time (a streamed run's windows): `parts` calls its argument with
  // each part. The vocabulary does not depend on how the texts are cut or ordered.
  using TextParts = FunctionRef<void(FunctionRef<void(std::span<const std::string>)> visit)>;
  static TextVectorizer fit(const TextOptions& options, TextParts parts);
  // A vectorizer with a recorded vocabulary: [0] must be "" and [1] "[UNK]", the rest unique and non-empty
  // (the caller checks, naming its file: see vocabulary_problem).
  static TextVectorizer with_vocabulary(const TextOptions& options, std::vector<std::string> vocabulary);
  // What is wrong with a recorded vocabulary, for a message ("entry 5 repeats \"the\""); empty when nothing.
  static std::string vocabulary_problem(const std::vector<std::string>& vocabulary);

  const TextOptions& options() const { return options_; }
  const std::vector<std::string>& vocabulary() const { return vocabulary_; }
  std::int64_t length() const { return options_.output_sequence_length; }

  // The id of one standardized token: its place in the vocabulary, or 1 when it has none.
  std::int32_t id(std::string_view token) const;
  // The ids of `text`, length() of them, as floats (the features a model's first layer reads) into `out`.
  void vectorize(std::string_view text, float* out) const;
  // Every row's ids, f32 [rows, length()].
  Tensor vectorize(std::span<const std::string> texts) const;

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  TextOptions options_;
  std::vector<std::string> vocabulary_;
  std::unordered_map<std::string, std::int32_t, Hash, std::equal_to<>> index_;
};

}  // namespace tctl
