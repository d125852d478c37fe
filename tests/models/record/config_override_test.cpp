// parse_override and apply_override (models/record/config_override.h): a key path's keys and indexes, a
// value read as JSON or else kept as text, objects made on the way, and the refusals naming the key.
#include "models/record/config_override.h"

#include <doctest/doctest.h>

#include "spec_error_check.h"

using namespace tctl;

TEST_CASE("--set values are JSON when they read as JSON, else text; keys are dotted paths with indexes") {
  CHECK(parse_override("optimizer.learning_rate=3e-4").value == 3e-4);
  CHECK(parse_override("input_shape=[28, 28, 1]").value == nlohmann::json::parse("[28, 28, 1]"));
  CHECK(parse_override("data.shuffle=false").value == false);
  CHECK(parse_override("data.csv=runs/a=b.csv").value == "runs/a=b.csv");  // the first '=' splits
  CHECK(parse_override("name=\"123\"").value == "123");
  CHECK(parse_override("name=").value == "");
  const ConfigOverride o = parse_override("callbacks[0].patience=5");
  CHECK(o.key == "callbacks[0].patience");
  CHECK(o.text == "callbacks[0].patience=5");
  for (const char* bad : {"=1", "a..b=1", "a.=1", ".a=1", "a[x]=1", "a[]=1", "a[1=1", "[0]=1", "a[1]b=1"}) {
    INFO(bad);
    testing::check_spec_error([&] { parse_override(bad); }, "", "--set", {"is no key path"});
  }
  testing::check_spec_error([&] { parse_override("epochs"); }, "", "--set", {"expected KEY=VALUE"});
}

TEST_CASE("apply_override sets a value at its path, making objects where there are none") {
  nlohmann::json doc = nlohmann::json::parse(R"({"a": {"b": 1}, "list": [{"x": 1}, {"x": 2}], "n": 3})");
  apply_override(doc, "a.b", 2);
  apply_override(doc, "a.c.d", "new");
  apply_override(doc, "list[1].x", 5);
  apply_override(doc, "fresh.key", true);
  CHECK(doc ==
        nlohmann::json::parse(
            R"({"a": {"b": 2, "c": {"d": "new"}}, "list": [{"x": 1}, {"x": 5}], "n": 3, "fresh": {"key": true}})"));
  testing::check_spec_error([&] { apply_override(doc, "list[2].x", 1); }, "--set list[2].x", "",
                            {"list has 2 entries, so no [2]"});
  testing::check_spec_error([&] { apply_override(doc, "n.m", 1); }, "--set n.m", "",
                            {"n is no object with keys: got 3"});
  testing::check_spec_error([&] { apply_override(doc, "a[0]", 1); }, "--set a[0]", "", {"a is no list: got an object"});
}
