// SpecReader: reads one JSON object of a spec or config, knowing its file and JSON path, so every error
// names the place: `configs/iris_mlp.json: layers[2].units: expected a positive integer, got -3`.
// Keys are marked as they are read; finish() rejects the ones nobody read, so a misspelled key is an
// error, not silently ignored.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tctl {

class SpecReader {
 public:
  // `j` must outlive the reader. Throws SpecError unless it is an object. `prefix` starts every message: a
  // file tensorctl wrote itself reads "damaged run summary: " there, as its user did not write it.
  SpecReader(const nlohmann::json& j, std::string file, std::string path, std::string prefix = "");

  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }
  // The JSON path of a key of this object: "layers[2].units".
  std::string path_of(const std::string& key) const;
  bool has(const std::string& key) const;
  const nlohmann::json& raw(const std::string& key);  // marks the key read; throws if missing

  // Each reader without a fallback requires its key; with one, a missing key reads as the fallback.
  std::int64_t positive_int(const std::string& key);
  std::int64_t positive_int(const std::string& key, std::int64_t fallback);
  std::int64_t non_negative_int(const std::string& key);
  std::int64_t non_negative_int(const std::string& key, std::int64_t fallback);
  // A finite number.
  double number(const std::string& key);
  double number(const std::string& key, double fallback);
  // A number in [lo, hi) (hi_inclusive: [lo, hi]).
  double number_in(const std::string& key, double fallback, double lo, double hi, bool hi_inclusive = false);
  bool boolean(const std::string& key);
  bool boolean(const std::string& key, bool fallback);
  std::string string(const std::string& key);
  std::string string(const std::string& key, const std::string& fallback);
  // A string from `choices`; anything else is an error listing them.
  std::string one_of(const std::string& key, const std::vector<std::string>& choices, const std::string& fallback);
  std::vector<std::int64_t> positive_int_list(const std::string& key);
  // A list, possibly empty, of strings; of numbers a float holds (finite, at most FLT_MAX in magnitude).
  std::vector<std::string> string_list(const std::string& key);
  std::vector<float> float_list(const std::string& key);
  SpecReader object(const std::string& key);
  // Marks a key as read without reading it (keys handled elsewhere).
  void skip(const std::string& key);

  // Throws SpecError for the first key that was never read, listing the known ones.
  void finish(const std::vector<std::string>& known_for_message = {}) const;
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;
  [[noreturn]] void fail_here(const std::string& message) const;
  [[noreturn]] void fail_element(const std::string& key, std::size_t index, const std::string& message) const;

 private:
  const nlohmann::json& j_;
  std::string file_;
  std::string path_;
  std::string prefix_;
  mutable std::set<std::string> read_;
};

// Whether `v` is an integer that int64 holds. nlohmann stores integers above INT64_MAX as unsigned, and reading
// one as int64 wraps it: 18446744073709551615 reads as -1.
bool fits_int64(const nlohmann::json& v);

// The JSON path of `key` under `parent`: "layers[2].units", or layers[2]["bad key"] (quoted as
// quote_for_message quotes) for a key that is not letters, digits, '_' and '-', so a key with a dot, a space
// or a terminal escape names its place unambiguously and safely.
std::string json_path_key(const std::string& parent, const std::string& key);

// "got -3", "got \"abc\"", "got an object": how a wrong JSON value is named in messages (a string quoted as
// quote_for_message quotes it).
std::string describe_json(const nlohmann::json& v);

// Nesting deeper than this is refused while parsing: no real spec or config comes near it, and it bounds the
// recursion of everything that walks a document afterwards.
inline constexpr std::size_t kMaxJsonDepth = 128;

// Parses JSON text. Every defect is a SpecError naming `file`: a syntax error with its line and column; a
// repeated key in one object, a number beyond a double's range and nesting deeper than kMaxJsonDepth with
// the JSON path where they occur.
nlohmann::json parse_json_text(const std::string& text, const std::string& file);
nlohmann::json parse_json_file(const std::string& path);

}  // namespace tctl
