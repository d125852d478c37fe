// TextVectorizer against what Keras' TextVectorization does with the same settings: the standardize modes,
// the two splits (UTF-8 characters whole), the vocabulary's order and size, and the ids of a row cut or
// padded to the sequence length, unknown tokens as 1.
#include <doctest/doctest.h>

#include "models/data/text_vectorizer.h"

namespace tctl {
namespace {

std::string standardized(std::string_view text, TextStandardize mode) {
  std::string out = "left over from before";
  standardize_text(text, mode, out);
  return out;
}

std::vector<std::string> tokens(std::string_view text, TextSplit mode) {
  std::vector<std::string> out;
  split_text(text, mode, [&out](std::string_view t) { out.emplace_back(t); });
  return out;
}

std::vector<float> ids_for(const TextVectorizer& v, std::string_view text) {
  std::vector<float> out(static_cast<std::size_t>(v.length()), -1.0f);
  v.vectorize(text, out.data());
  return out;
}

TextOptions options(std::int64_t max_tokens, std::int64_t length) {
  TextOptions o;
  o.max_tokens = max_tokens;
  o.output_sequence_length = length;
  return o;
}

}  // namespace

TEST_SUITE("text_vectorizer") {
  TEST_CASE("standardize: ASCII lowering and Keras' punctuation, other bytes kept") {
    const std::string text = "Don't PANIC: it's 42 (Ünïcode) {x}~";
    CHECK(standardized(text, TextStandardize::kLowerAndStripPunctuation) == "dont panic its 42 Ünïcode x");
    CHECK(standardized(text, TextStandardize::kLower) == "don't panic: it's 42 (Ünïcode) {x}~");
    CHECK(standardized(text, TextStandardize::kStripPunctuation) == "Dont PANIC its 42 Ünïcode x");
    CHECK(standardized(text, TextStandardize::kNone) == text);
    CHECK(standardized("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", TextStandardize::kStripPunctuation).empty());
  }

  TEST_CASE("split: whitespace runs, or every UTF-8 character") {
    CHECK(tokens("  a\tbb\n\r ccc  ", TextSplit::kWhitespace) == std::vector<std::string>{"a", "bb", "ccc"});
    CHECK(tokens(" \t ", TextSplit::kWhitespace).empty());
    CHECK(tokens("", TextSplit::kCharacter).empty());
    CHECK(tokens("a é€😀", TextSplit::kCharacter) == std::vector<std::string>{"a", " ", "é", "€", "😀"});
    // A byte that begins no character, and a character cut short, are tokens of one byte.
    CHECK(tokens("\xff"
                 "a\xe2\x82",
                 TextSplit::kCharacter) == std::vector<std::string>{"\xff", "a", "\xe2", "\x82"});
  }

  TEST_CASE("the vocabulary: padding, unknown, then by falling count, ties in falling byte order as Keras'") {
    const std::vector<std::string> texts{"b a c", "a b d", "a [UNK] e"};
    const TextVectorizer v = TextVectorizer::fit(options(100, 4), texts);
    // Keras' adapt() sorts by (count, token) and reverses: its vocabulary here is the same list.
    CHECK(v.vocabulary() == std::vector<std::string>{"", "[UNK]", "a", "b", "unk", "e", "d", "c"});
    // max_tokens counts the two reserved ids.
    const TextVectorizer small = TextVectorizer::fit(options(4, 4), texts);
    CHECK(small.vocabulary() == std::vector<std::string>{"", "[UNK]", "a", "b"});
    CHECK(ids_for(small, "A b, C!") == std::vector<float>{2, 3, 1, 0});
  }

  TEST_CASE("each row: cut to the length, padded with zeros, unknown tokens 1") {
    const TextVectorizer v = TextVectorizer::fit(options(10, 3), std::vector<std::string>{"x y z", "x y", "x"});
    CHECK(v.vocabulary() == std::vector<std::string>{"", "[UNK]", "x", "y", "z"});
    CHECK(ids_for(v, "z y x x") == std::vector<float>{4, 3, 2});
    CHECK(ids_for(v, "y") == std::vector<float>{3, 0, 0});
    CHECK(ids_for(v, "") == std::vector<float>{0, 0, 0});
    CHECK(ids_for(v, "w x") == std::vector<float>{1, 2, 0});
    const Tensor batch = v.vectorize(std::vector<std::string>{"x", "q z"});
    REQUIRE(batch.shape() == Shape{2, 3});
    CHECK(std::vector<float>(batch.data<float>(), batch.data<float>() + 6) == std::vector<float>{2, 0, 0, 1, 4, 0});
  }

  TEST_CASE("character tokens") {
    TextOptions o = options(10, 5);
    o.split = TextSplit::kCharacter;
    o.standardize = TextStandardize::kNone;
    const TextVectorizer v = TextVectorizer::fit(o, std::vector<std::string>{"aab", "é"});
    CHECK(v.vocabulary() == std::vector<std::string>{"", "[UNK]", "a", "é", "b"});
    CHECK(ids_for(v, "béA") == std::vector<float>{4, 3, 1, 0, 0});
  }

  TEST_CASE("a recorded vocabulary is checked") {
    CHECK(TextVectorizer::vocabulary_problem({"", "[UNK]", "a", "b"}).empty());
    CHECK(!TextVectorizer::vocabulary_problem({"[UNK]", "", "a"}).empty());
    CHECK(!TextVectorizer::vocabulary_problem({""}).empty());
    CHECK(TextVectorizer::vocabulary_problem({"", "[UNK]", "a", "b", "a"}) == "entry 4 repeats entry 2, \"a\"");
    CHECK(TextVectorizer::vocabulary_problem({"", "[UNK]", "a", ""}) == "entry 3 is a reserved token");
    const TextVectorizer v = TextVectorizer::with_vocabulary(options(5, 2), {"", "[UNK]", "q", "r"});
    CHECK(ids_for(v, "r q s") == std::vector<float>{3, 2});
  }
}

}  // namespace tctl
