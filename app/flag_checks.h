// CLI11 validators for numeric and device flags whose messages read like the rest of tensorctl's errors:
// `--epochs: expected a positive integer, got 0` instead of CLI11's range dump.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace tctl::app {

// An integer >= 1, written in decimal (no sign, no fraction, no exponent).
CLI::Validator positive_integer();
// An integer >= 0.
CLI::Validator non_negative_integer();
// An integer in [lo, hi].
CLI::Validator integer_in(std::int64_t lo, std::int64_t hi);
// A device name tensorctl knows how to spell (core/device.h is_device_name), present here or not; else the
// message of device_name_error.
CLI::Validator device_name();
// An output file given as an empty string: refused, as check_output_path refuses it, where the flag's absence
// means standard output or no file (predict --output, import-keras -o, profile --trace).
CLI::Validator output_path();
// A value that cannot be empty where an empty one would read as the flag's absence (race-check --graph,
// --weights, profile --loss): "expected `expected`, got an empty string".
CLI::Validator non_empty(const std::string& expected);

// The model file a positional SPEC|CONFIG|RUN_DIR names: the path itself, or a directory's model.json (a run
// directory; one without it is refused as "not a run directory", naming the directory).
std::string model_file_of(const std::string& path);

}  // namespace tctl::app
