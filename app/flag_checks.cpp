#include "app/flag_checks.h"

#include <charconv>
#include <filesystem>
#include <limits>
#include <string>

#include "core/device.h"
#include "core/errors.h"
#include "models/io/run_layout.h"

namespace tctl::app {

namespace {

// CLI11 runs validators on the text before converting it, so a non-number is reported here too, with the
// same wording as an out-of-range value.
CLI::Validator integer_check(std::int64_t lo, std::int64_t hi, const std::string& expected,
                             const std::string& type_name) {
  return CLI::Validator(
      [lo, hi, expected](std::string& text) -> std::string {
        std::int64_t v = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        const bool ok = ec == std::errc() && end == text.data() + text.size() && v >= lo && v <= hi;
        if (ok) return std::string();
        // Numbers are shown bare and anything else quoted, as describe_json does for spec values.
        double number = 0.0;
        auto [num_end, num_ec] = std::from_chars(text.data(), text.data() + text.size(), number);
        const bool numeric = !text.empty() && num_ec == std::errc() && num_end == text.data() + text.size();
        // A whole number past the 64-bit range reads as one: say where the range ends.
        const bool too_large = ec == std::errc::result_out_of_range && text.find_first_of(".eE") == std::string::npos &&
                               text[0] != '-' && hi == std::numeric_limits<std::int64_t>::max();
        return "expected " + expected + (too_large ? " of at most " + std::to_string(hi) : "") + ", got " +
               (numeric ? text : "\"" + text + "\"");
      },
      type_name);
}

}  // namespace

CLI::Validator positive_integer() {
  return integer_check(1, std::numeric_limits<std::int64_t>::max(), "a positive integer", "POSITIVE");
}

CLI::Validator non_negative_integer() {
  return integer_check(0, std::numeric_limits<std::int64_t>::max(), "a non-negative integer", "NONNEGATIVE");
}

CLI::Validator integer_in(std::int64_t lo, std::int64_t hi) {
  const std::string range = std::to_string(lo) + ".." + std::to_string(hi);
  return integer_check(lo, hi, "an integer in " + range, "in " + range);
}

CLI::Validator device_name() {
  // No type name: the flag's help keeps reading `--device TEXT`.
  return CLI::Validator([](std::string& text) -> std::string { return device_name_error(text); }, "");
}

CLI::Validator non_empty(const std::string& expected) {
  return CLI::Validator(
      [expected](std::string& text) -> std::string {
        return text.empty() ? "expected " + expected + ", got an empty string" : std::string();
      },
      "");
}

CLI::Validator output_path() { return non_empty("a file name or - for standard output"); }

std::string model_file_of(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) return path;
  const std::filesystem::path file = RunLayout(path).model();
  if (!std::filesystem::exists(file, ec)) throw SpecError(path, "", "not a run directory: model.json is missing");
  return file.string();
}

}  // namespace tctl::app
