#include "models/io/spec_reader.h"

#include <doctest/doctest.h>

#include <string>

#include "core/errors.h"
#include "spec_error_check.h"

namespace tctl {
namespace {

// parse_json_text must fail with a SpecError at `where` whose message contains `message_part`.
void expect_parse_error(const std::string& text, const std::string& where, const std::string& message_part) {
  INFO("text: " << text);
  testing::check_spec_error([&] { parse_json_text(text, "spec.json"); }, "spec.json", where, {message_part});
}

TEST_CASE("parse_json_text refuses a repeated key, naming the key and its place") {
  expect_parse_error(R"({"units": 2, "units": 3})", "units", "duplicate key \"units\"");
  expect_parse_error(R"({"layers": [{"type": "Dense"}, {"type": "Dense", "units": 1, "type": "Flatten"}]})",
                     "layers[1].type", "duplicate key \"type\"");
  // The same key in different objects is fine.
  CHECK(parse_json_text(R"({"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 3}, {"x": 4}]})", "spec.json")["c"][1]["x"] == 4);
}

TEST_CASE("a key that is not a plain name is quoted in the place, and strings in messages are escaped") {
  CHECK(json_path_key("", "units") == "units");
  CHECK(json_path_key("layers[2]", "use_bias") == "layers[2].use_bias");
  CHECK(json_path_key("layers[2]", "pool-size9") == "layers[2].pool-size9");
  // A dot would read as nesting, a space or an escape would mislead or reach the terminal.
  CHECK(json_path_key("a", "b.c") == "a[\"b.c\"]");
  CHECK(json_path_key("", "") == "[\"\"]");
  CHECK(json_path_key("layers[0]", "bad\nkey\x1b") == "layers[0][\"bad\\nkey\\u001b\"]");
  expect_parse_error(R"({"a": {"x\u001b[2J": 1, "x\u001b[2J": 2}})", "a[\"x\\u001b[2J\"]",
                     "duplicate key \"x\\u001b[2J\"");

  const nlohmann::json spec = nlohmann::json::parse(R"({"layers": [{"units": "8\u001b[31m", "odd key": 1,
                                                      "activation": "re\nlu"}]})");
  SpecReader layer(spec["layers"][0], "spec.json", "layers[0]");
  CHECK_THROWS_WITH(layer.positive_int("units"),
                    "spec.json: layers[0].units: expected a positive integer, got \"8\\u001b[31m\"");
  CHECK_THROWS_WITH(layer.one_of("activation", {"relu"}, "relu"),
                    "spec.json: layers[0].activation: unknown value \"re\\nlu\" (known: relu)");
  CHECK_THROWS_WITH(layer.finish({"units"}), "spec.json: layers[0][\"odd key\"]: unknown key (known keys here: units)");
  // A long string is cut, so one value cannot fill the message.
  CHECK(describe_json(std::string(5000, 'x')).size() < 120);
}

TEST_CASE("parse_json_text refuses a number beyond a double's range, naming its place") {
  expect_parse_error(R"({"optimizer": {"learning_rate": 1e400}})", "optimizer.learning_rate",
                     "number 1e400 is out of range");
  expect_parse_error(R"({"input_shape": [4, -1e999]})", "input_shape[1]", "number -1e999 is out of range");
  expect_parse_error("[1e400]", "[0]", "out of range");
  // Small numbers round to zero, as in every JSON reader; large integers become doubles.
  CHECK(parse_json_text("[1e-400, 123456789012345678901234567890]", "spec.json")[0] == 0.0);
}

TEST_CASE("parse_json_text bounds nesting, naming where it went too deep") {
  std::string ok(kMaxJsonDepth, '[');
  ok += std::string(kMaxJsonDepth, ']');
  CHECK_NOTHROW(parse_json_text(ok, "spec.json"));
  // Tens of thousands of levels: one error, no stack overflow, no gigabytes.
  const std::size_t deep = 50000;
  std::string text;
  for (std::size_t i = 0; i < deep; ++i) text += "{\"a\":";
  text += "1" + std::string(deep, '}');
  const SpecError e = testing::catch_spec_error([&] { parse_json_text(text, "spec.json"); });
  CHECK(e.file() == "spec.json");
  CHECK(e.message() == "nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  CHECK(e.where().rfind("a.a.a.", 0) == 0);
}

TEST_CASE("parse_json_text reports syntax errors by line and column") {
  expect_parse_error("{\n  \"a\": 1,\n  \"b\" 2\n}", "line 3, column 7", "invalid JSON: syntax error");
}

}  // namespace
}  // namespace tctl
