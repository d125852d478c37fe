#include "models/io/spec_reader.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/text.h"
#include "models/io/atomic_file.h"

namespace tctl {

std::string describe_json(const nlohmann::json& v) {
  if (v.is_string()) return "got " + quote_for_message(v.get<std::string>());
  if (v.is_object()) return "got an object";
  if (v.is_array()) return "got a list";
  if (v.is_null()) return "got null";
  return "got " + v.dump();
}

SpecReader::SpecReader(const nlohmann::json& j, std::string file, std::string path, std::string prefix)
    : j_(j), file_(std::move(file)), path_(std::move(path)), prefix_(std::move(prefix)) {
  if (!j_.is_object()) fail_here("expected an object, " + describe_json(j_));
}

std::string json_path_key(const std::string& parent, const std::string& key) {
  const bool plain = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
  if (!plain) return parent + "[" + quote_for_message(key) + "]";
  return parent.empty() ? key : parent + "." + key;
}

std::string SpecReader::path_of(const std::string& key) const { return json_path_key(path_, key); }

bool SpecReader::has(const std::string& key) const { return j_.contains(key); }

void SpecReader::fail(const std::string& key, const std::string& message) const {
  throw SpecError(file_, path_of(key), prefix_ + message);
}

void SpecReader::fail_element(const std::string& key, std::size_t index, const std::string& message) const {
  throw SpecError(file_, path_of(key) + "[" + std::to_string(index) + "]", prefix_ + message);
}

void SpecReader::fail_here(const std::string& message) const {
  throw SpecError(file_, path_.empty() ? "top level" : path_, prefix_ + message);
}

const nlohmann::json& SpecReader::raw(const std::string& key) {
  read_.insert(key);
  if (!j_.contains(key)) fail_here("missing required key \"" + key + "\"");
  return j_.at(key);
}

void SpecReader::skip(const std::string& key) { read_.insert(key); }

bool fits_int64(const nlohmann::json& v) {
  return v.is_number_integer() &&
         !(v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX));
}

std::int64_t SpecReader::positive_int(const std::string& key) {
  const auto& v = raw(key);
  if (v.is_number_integer() && !fits_int64(v))
    fail(key, "expected a positive integer of at most 9223372036854775807, " + describe_json(v));
  if (!v.is_number_integer() || v.get<std::int64_t>() <= 0)
    fail(key, "expected a positive integer, " + describe_json(v));
  return v.get<std::int64_t>();
}

std::int64_t SpecReader::positive_int(const std::string& key, std::int64_t fallback) {
  return has(key) ? positive_int(key) : (skip(key), fallback);
}

std::int64_t SpecReader::non_negative_int(const std::string& key) {
  const auto& v = raw(key);
  if (v.is_number_integer() && !fits_int64(v))
    fail(key, "expected a non-negative integer of at most 9223372036854775807, " + describe_json(v));
  if (!v.is_number_integer() || v.get<std::int64_t>() < 0)
    fail(key, "expected a non-negative integer, " + describe_json(v));
  return v.get<std::int64_t>();
}

std::int64_t SpecReader::non_negative_int(const std::string& key, std::int64_t fallback) {
  return has(key) ? non_negative_int(key) : (skip(key), fallback);
}

double SpecReader::number(const std::string& key) {
  const auto& v = raw(key);
  if (!v.is_number() || !std::isfinite(v.get<double>())) fail(key, "expected a number, " + describe_json(v));
  return v.get<double>();
}

double SpecReader::number(const std::string& key, double fallback) {
  return has(key) ? number(key) : (skip(key), fallback);
}

double SpecReader::number_in(const std::string& key, double fallback, double lo, double hi, bool hi_inclusive) {
  double x = number(key, fallback);
  bool ok = x >= lo && (hi_inclusive ? x <= hi : x < hi);
  if (!ok) {
    // An open upper end reads "at least" (JSON would print infinity as null); callers write a tiny positive
    // lower bound to mean "positive", and the message should say that rather than quote 1e-12.
    if (std::isinf(hi) && lo > 0.0 && lo <= 1e-12)
      fail(key, "expected a positive number, " + describe_json(j_.at(key)));
    if (std::isinf(hi)) fail(key, fmt::format("expected a number of at least {:g}, {}", lo, describe_json(j_.at(key))));
    std::string range = "[" + nlohmann::json(lo).dump() + ", " + nlohmann::json(hi).dump() + (hi_inclusive ? "]" : ")");
    fail(key, "expected a number in " + range + ", " + describe_json(j_.at(key)));
  }
  return x;
}

bool SpecReader::boolean(const std::string& key) {
  const auto& v = raw(key);
  if (!v.is_boolean()) fail(key, "expected true or false, " + describe_json(v));
  return v.get<bool>();
}

bool SpecReader::boolean(const std::string& key, bool fallback) {
  return has(key) ? boolean(key) : (skip(key), fallback);
}

std::string SpecReader::string(const std::string& key) {
  const auto& v = raw(key);
  if (!v.is_string()) fail(key, "expected a string, " + describe_json(v));
  return v.get<std::string>();
}

std::string SpecReader::string(const std::string& key, const std::string& fallback) {
  return has(key) ? string(key) : (skip(key), fallback);
}

std::string SpecReader::one_of(const std::string& key, const std::vector<std::string>& choices,
                               const std::string& fallback) {
  std::string s = string(key, fallback);
  for (const auto& c : choices)
    if (c == s) return s;
  fail(key, "unknown value " + quote_for_message(s) + " (known: " + join(choices) + ")");
}

std::vector<std::int64_t> SpecReader::positive_int_list(const std::string& key) {
  const auto& v = raw(key);
  if (!v.is_array() || v.empty()) fail(key, "expected a non-empty list of positive integers, " + describe_json(v));
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number_integer() || v[i].get<std::int64_t>() <= 0)
      fail_element(key, i, "expected a positive integer, " + describe_json(v[i]));
    out.push_back(v[i].get<std::int64_t>());
  }
  return out;
}

std::vector<std::string> SpecReader::string_list(const std::string& key) {
  const auto& v = raw(key);
  if (!v.is_array()) fail(key, "expected a list of strings, " + describe_json(v));
  std::vector<std::string> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) fail_element(key, i, "expected a string, " + describe_json(v[i]));
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

std::vector<float> SpecReader::float_list(const std::string& key) {
  const auto& v = raw(key);
  if (!v.is_array()) fail(key, "expected a list of numbers, " + describe_json(v));
  std::vector<float> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number() || !(std::abs(v[i].get<double>()) <= std::numeric_limits<float>::max()))
      fail_element(key, i, "expected a number a float holds, " + describe_json(v[i]));
    out.push_back(static_cast<float>(v[i].get<double>()));
  }
  return out;
}

SpecReader SpecReader::object(const std::string& key) { return SpecReader(raw(key), file_, path_of(key), prefix_); }

void SpecReader::finish(const std::vector<std::string>& known_for_message) const {
  for (auto it = j_.begin(); it != j_.end(); ++it) {
    if (read_.contains(it.key())) continue;
    const auto& names =
        known_for_message.empty() ? std::vector<std::string>(read_.begin(), read_.end()) : known_for_message;
    fail(it.key(), "unknown key (known keys here: " + join(names) + ")");
  }
}

namespace {

// Where the parser is, as a JSON path ("layers[2].units"), kept up to date from nlohmann's parse events so
// that an error found mid-parse (a repeated key, a number out of range, nesting too deep) names its place.
class JsonPlace {
 public:
  explicit JsonPlace(const std::string& file) : file_(file) {}

  bool on_event(nlohmann::json::parse_event_t event, const nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        step_into_element();
        if (frames_.size() >= kMaxJsonDepth)
          throw SpecError(file_, path(), "nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
        frames_.push_back(Frame{event == Event::array_start});
        break;
      case Event::key: {
        Frame& f = frames_.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second) throw SpecError(file_, path(), "duplicate key " + quote_for_message(f.key));
        break;
      }
      case Event::value:
        step_into_element();
        break;
      case Event::object_end:
      case Event::array_end:
        frames_.pop_back();
        break;
    }
    return true;
  }

  // The path of the value being read: after a key, that key; in a list, the next element.
  std::string path() const {
    std::string out;
    for (const Frame& f : frames_) {
      if (f.array) {
        out += "[" + std::to_string(f.index < 0 ? 0 : f.index) + "]";
      } else if (!f.keys.empty()) {
        out = json_path_key(out, f.key);
      }
    }
    return out.empty() ? "top level" : out;
  }

  const std::string& file() const { return file_; }

  // Called when the parser stopped before reporting the value it was reading.
  void step_past_last_element() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
  }

 private:
  struct Frame {
    bool array = false;
    std::int64_t index = -1;  // arrays: the element being read
    std::string key;          // objects: the key being read
    std::set<std::string> keys;
  };
  void step_into_element() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
  }

  const std::string& file_;
  std::vector<Frame> frames_;
};

// nlohmann's SAX events, handed to a JsonPlace: the first of parse_json_text's two passes, which builds
// nothing. (nlohmann's own parser with a callback builds as it goes, but at the end of every object it scans
// the array holding it: 300,000 layers took 24 s.) A parse error is thrown as its own type, as a parse
// without a handler would throw it.
class PlaceEvents {
 public:
  explicit PlaceEvents(JsonPlace& place) : place_(place) {}
  using json = nlohmann::json;
  using Event = json::parse_event_t;

  bool null() { return value(); }
  bool boolean(bool) { return value(); }
  bool number_integer(json::number_integer_t) { return value(); }
  bool number_unsigned(json::number_unsigned_t) { return value(); }
  bool number_float(json::number_float_t, const json::string_t&) { return value(); }
  bool string(json::string_t&) { return value(); }
  bool binary(json::binary_t&) { return value(); }
  bool start_object(std::size_t) { return place_.on_event(Event::object_start, kNull); }
  bool key(json::string_t& k) { return place_.on_event(Event::key, json(k)); }
  bool end_object() { return place_.on_event(Event::object_end, kNull); }
  bool start_array(std::size_t) { return place_.on_event(Event::array_start, kNull); }
  bool end_array() { return place_.on_event(Event::array_end, kNull); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    if (const auto* p = dynamic_cast<const json::parse_error*>(&e)) throw *p;
    if (const auto* r = dynamic_cast<const json::out_of_range*>(&e)) throw *r;
    throw SpecError(place_.file(), place_.path(), std::string("invalid JSON: ") + e.what());
  }

 private:
  bool value() { return place_.on_event(Event::value, kNull); }
  inline static const json kNull;
  JsonPlace& place_;
};

// "1e400" from nlohmann's "number overflow parsing '1e400'".
std::string quoted_token(const std::string& what) {
  const auto open = what.find('\'');
  const auto close = what.rfind('\'');
  if (open == std::string::npos || close <= open) return "";
  return what.substr(open + 1, close - open - 1);
}

}  // namespace

nlohmann::json parse_json_text(const std::string& text, const std::string& file) {
  JsonPlace place(file);
  try {
    // Checked first (syntax, nesting, repeated keys, each error at its place), then built without a callback.
    PlaceEvents events(place);
    nlohmann::json::sax_parse(text, &events);
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann reports a byte offset; turn it into the line and column an editor shows.
    std::size_t offset = std::min<std::size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
    std::size_t line = 1, column = 1;
    for (std::size_t i = 0; i < offset; ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    std::string what = e.what();
    auto pos = what.find("syntax error");
    throw SpecError(file, "line " + std::to_string(line) + ", column " + std::to_string(column),
                    "invalid JSON: " + (pos == std::string::npos ? what : what.substr(pos)));
  } catch (const nlohmann::json::out_of_range& e) {
    // The only range error of parsing: a number beyond a double's range, which nlohmann reports without a place.
    place.step_past_last_element();
    throw SpecError(file, place.path(),
                    "number " + quoted_token(e.what()) + " is out of range (a double holds up to about 1.8e308)");
  } catch (const nlohmann::json::exception& e) {
    throw SpecError(file, place.path(), std::string("invalid JSON: ") + e.what());
  }
}

// Specs, configs and run records are kilobytes; a Keras model's JSON without its weights rarely reaches one MB.
constexpr std::size_t kMaxJsonBytes = std::size_t{64} << 20;

nlohmann::json parse_json_file(const std::string& path) {
  return parse_json_text(read_file(path, path, kMaxJsonBytes), path);
}

}  // namespace tctl
