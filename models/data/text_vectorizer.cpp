#include "models/data/text_vectorizer.h"

#include <algorithm>
#include <array>
#include <utility>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/text.h"

namespace tctl {

namespace {

constexpr std::array<std::pair<TextStandardize, std::string_view>, 4> kStandardizeNames{{
    {TextStandardize::kLowerAndStripPunctuation, "lower_and_strip_punctuation"},
    {TextStandardize::kLower, "lower"},
    {TextStandardize::kStripPunctuation, "strip_punctuation"},
    {TextStandardize::kNone, "none"},
}};
constexpr std::array<std::pair<TextSplit, std::string_view>, 2> kSplitNames{{
    {TextSplit::kWhitespace, "whitespace"},
    {TextSplit::kCharacter, "character"},
}};

template <class Table>
std::vector<std::string> names_of(const Table& table) {
  std::vector<std::string> out;
  for (const auto& [value, name] : table) out.emplace_back(name);
  return out;
}

// Keras' punctuation set (the ASCII punctuation characters), one table lookup per byte.
constexpr std::array<bool, 256> kPunctuation = [] {
  std::array<bool, 256> t{};
  for (const char c : std::string_view("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")) t[static_cast<unsigned char>(c)] = true;
  return t;
}();

}  // namespace

std::string_view text_standardize_name(TextStandardize s) {
  for (const auto& [value, name] : kStandardizeNames)
    if (value == s) return name;
  return "?";
}

std::string_view text_split_name(TextSplit s) {
  for (const auto& [value, name] : kSplitNames)
    if (value == s) return name;
  return "?";
}

const std::vector<std::string>& text_standardize_names() {
  static const std::vector<std::string> names = names_of(kStandardizeNames);
  return names;
}

const std::vector<std::string>& text_split_names() {
  static const std::vector<std::string> names = names_of(kSplitNames);
  return names;
}

TextStandardize text_standardize_from_name(std::string_view name) {
  for (const auto& [value, n] : kStandardizeNames)
    if (n == name) return value;
  TCTL_CHECK(false, "unknown standardize mode");
  return TextStandardize::kNone;
}

TextSplit text_split_from_name(std::string_view name) {
  for (const auto& [value, n] : kSplitNames)
    if (n == name) return value;
  TCTL_CHECK(false, "unknown split mode");
  return TextSplit::kWhitespace;
}

nlohmann::json TextOptions::to_json() const {
  return {{"column", column},
          {"standardize", std::string(text_standardize_name(standardize))},
          {"split", std::string(text_split_name(split))},
          {"max_tokens", max_tokens},
          {"output_sequence_length", output_sequence_length}};
}

void standardize_text(std::string_view text, TextStandardize mode, std::string& out) {
  out.clear();
  out.reserve(text.size());
  const bool lower = mode == TextStandardize::kLower || mode == TextStandardize::kLowerAndStripPunctuation;
  const bool strip = mode == TextStandardize::kStripPunctuation || mode == TextStandardize::kLowerAndStripPunctuation;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (strip && kPunctuation[u]) continue;
    out.push_back(lower && u >= 'A' && u <= 'Z' ? static_cast<char>(u + ('a' - 'A')) : c);
  }
}

std::size_t utf8_char_length(std::string_view text) {
  if (text.empty()) return 0;
  const auto lead = static_cast<unsigned char>(text[0]);
  const std::size_t n = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 1;
  if (n > text.size()) return 1;
  for (std::size_t i = 1; i < n; ++i)
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) return 1;
  return n;
}

TextVectorizer TextVectorizer::fit(const TextOptions& options, std::span<const std::string> texts) {
  return fit(options, [&](FunctionRef<void(std::span<const std::string>)> visit) { visit(texts); });
}

TextVectorizer TextVectorizer::fit(const TextOptions& options, TextParts parts) {
  TCTL_CHECK(options.max_tokens >= 2 && options.output_sequence_length > 0, "TextVectorizer::fit: unresolved options");
  std::unordered_map<std::string, std::int64_t, Hash, std::equal_to<>> counts;
  std::string standardized;
  parts([&](std::span<const std::string> texts) {
    for (const std::string& text : texts) {
      standardize_text(text, options.standardize, standardized);
      split_text(standardized, options.split, [&counts](std::string_view token) {
        if (auto it = counts.find(token); it != counts.end())
          ++it->second;
        else
          counts.emplace(std::string(token), 1);
      });
    }
  });
  std::vector<std::pair<std::int64_t, std::string>> ranked;
  ranked.reserve(counts.size());
  for (auto& [token, count] : counts)
    // The reserved tokens keep their ids: "[UNK]" written in a text is an unknown word like any other.
    if (token != kOovToken) ranked.emplace_back(count, token);
  // Ties by falling byte order, as Keras' adapt() ranks them (np.lexsort((tokens, counts))[::-1]), so a
  // vocabulary cut by max_tokens keeps the tokens Keras keeps, at the ids Keras gives them.
  std::sort(ranked.begin(), ranked.end(),
            [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second > b.second; });
  std::vector<std::string> vocabulary{std::string(kPaddingToken), std::string(kOovToken)};
  const auto room = static_cast<std::size_t>(options.max_tokens) - 2;
  for (std::size_t i = 0; i < ranked.size() && i < room; ++i) vocabulary.push_back(std::move(ranked[i].second));
  return with_vocabulary(options, std::move(vocabulary));
}

std::string TextVectorizer::vocabulary_problem(const std::vector<std::string>& vocabulary) {
  if (vocabulary.size() < 2 || vocabulary[0] != kPaddingToken || vocabulary[1] != kOovToken)
    return "a vocabulary begins with the padding token \"\" and the out-of-vocabulary token \"[UNK]\"";
  std::unordered_map<std::string_view, std::size_t> seen;
  for (std::size_t i = 2; i < vocabulary.size(); ++i) {
    if (vocabulary[i].empty() || vocabulary[i] == kOovToken) return fmt::format("entry {} is a reserved token", i);
    if (auto [it, fresh] = seen.emplace(vocabulary[i], i); !fresh)
      return fmt::format("entry {} repeats entry {}, {}", i, it->second, quote_for_message(vocabulary[i]));
  }
  return "";
}

TextVectorizer TextVectorizer::with_vocabulary(const TextOptions& options, std::vector<std::string> vocabulary) {
  TCTL_CHECK(vocabulary_problem(vocabulary).empty(), "TextVectorizer: malformed vocabulary");
  TextVectorizer v;
  v.options_ = options;
  v.vocabulary_ = std::move(vocabulary);
  v.index_.reserve(v.vocabulary_.size());
  for (std::size_t i = 2; i < v.vocabulary_.size(); ++i)
    v.index_.emplace(v.vocabulary_[i], static_cast<std::int32_t>(i));
  return v;
}

std::int32_t TextVectorizer::id(std::string_view token) const {
  const auto it = index_.find(token);
  return it == index_.end() ? 1 : it->second;
}

void TextVectorizer::vectorize(std::string_view text, float* out) const {
  thread_local std::string standardized;
  standardize_text(text, options_.standardize, standardized);
  const std::int64_t length = options_.output_sequence_length;
  std::int64_t n = 0;
  // Tokens past the length are still split (the loop cannot stop early) but not looked up.
  split_text(standardized, options_.split, [&](std::string_view token) {
    if (n < length) out[n++] = static_cast<float>(id(token));
  });
  std::fill(out + n, out + length, 0.0f);
}

Tensor TextVectorizer::vectorize(std::span<const std::string> texts) const {
  const auto rows = static_cast<std::int64_t>(texts.size());
  Tensor x = Tensor::empty(DType::kF32, Shape{rows, length()});
  float* p = x.mutable_data<float>();
  for (std::int64_t r = 0; r < rows; ++r) vectorize(texts[static_cast<std::size_t>(r)], p + r * length());
  return x;
}

}  // namespace tctl
