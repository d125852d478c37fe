// Parallel: the shared layer checks for both merges, naming and variables, the JSON round trip, one case per
// bad key, and branches that the executor runs concurrently (seen through the profiler, not timings).
#include <doctest/doctest.h>

#include "core/errors.h"
#include "core/profiler.h"
#include "models/nn/layers/layer_test_util.h"

namespace tctl {
namespace {

using testing::build_one_layer;
using testing::catch_spec_error;
using testing::check_layer;
using testing::check_layer_spec_error;

TEST_CASE("Parallel passes the layer checks with a concat merge of Dense branches") {
  auto checked = check_layer(
      R"({"type":"Parallel","merge":"concat","branches":[[{"type":"Dense","units":4}],
          [{"type":"Dense","units":3,"activation":"tanh"},{"type":"Dense","units":2}]]})",
      {6});
  CHECK(checked.output_shape == Shape{6});
  CHECK(checked.layer().name() == "parallel");
  CHECK(checked.layer().param_count() == (6 + 1) * 4 + (6 + 1) * 3 + (3 + 1) * 2);
}

TEST_CASE("Parallel passes the layer checks with an add merge of Dense branches") {
  auto checked = check_layer(
      R"({"type":"Parallel","merge":"add","branches":[[{"type":"Dense","units":4}],
          [{"type":"Dense","units":4,"activation":"sigmoid"}],[{"type":"Delay","ms":0},{"type":"Dense","units":4}]]})",
      {5});
  CHECK(checked.output_shape == Shape{4});
  check_layer(
      R"({"type":"Parallel","merge":"add","branches":[[{"type":"Dense","units":3}],[{"type":"Dense","units":3}]]})",
      {2});
}

TEST_CASE("Parallel names sub-layers uniquely and exposes their variables under its own name") {
  auto net = build_one_layer(
      R"({"type":"Parallel","name":"par","branches":[[{"type":"Dense","units":2},{"type":"Dense","units":2}],
          [{"type":"Dense","units":2,"name":"dense_1"},{"type":"Dense","units":2}]]})",
      {3});
  const Layer& par = *net->layers()[0];
  std::vector<std::string> names;
  for (const auto& v : par.variables()) names.push_back(v->name());
  // Automatic names step around the given "dense_1" and count the unnamed Dense layers, like a Sequential's.
  CHECK(names == std::vector<std::string>{"par/dense/kernel", "par/dense/bias", "par/dense_2/kernel",
                                          "par/dense_2/bias", "par/dense_1/kernel", "par/dense_1/bias",
                                          "par/dense_3/kernel", "par/dense_3/bias"});
  CHECK(net->variables().size() == 8);
  // Two Dense layers of the same shape in one Parallel start from different weights.
  CHECK(par.variables()[2]->read().to_floats() != par.variables()[6]->read().to_floats());

  const nlohmann::json j = par.to_json();
  CHECK(j["merge"] == "concat");
  CHECK(j["branches"][1][0]["name"] == "dense_1");
  CHECK(j["branches"][1][1]["name"] == "dense_3");
  CHECK(j["branches"][0][0]["units"] == 2);
}

TEST_CASE("A Parallel inside a Parallel prefixes variables with both names") {
  auto net = build_one_layer(
      R"({"type":"Parallel","merge":"add","branches":[[{"type":"Dense","units":2}],
          [{"type":"Parallel","branches":[[{"type":"Dense","units":1}],[{"type":"Dense","units":1}]]}]]})",
      {3});
  std::vector<std::string> names;
  for (const auto& v : net->variables()) names.push_back(v->name());
  CHECK(names == std::vector<std::string>{"parallel/dense/kernel", "parallel/dense/bias",
                                          "parallel/parallel/dense/kernel", "parallel/parallel/dense/bias",
                                          "parallel/parallel/dense_1/kernel", "parallel/parallel/dense_1/bias"});
  check_layer(R"({"type":"Parallel","merge":"add","branches":[[{"type":"Dense","units":2}],
          [{"type":"Parallel","branches":[[{"type":"Dense","units":1}],[{"type":"Dense","units":1}]]}]]})",
              {3});
}

TEST_CASE("Parallel computes the concatenation and the sum of its branches") {
  const char* branches =
      R"([[{"type":"Dense","units":2,"use_bias":false}],[{"type":"Dense","units":2,"use_bias":false}]])";
  for (const std::string merge : {"concat", "add"}) {
    CAPTURE(merge);
    auto net = build_one_layer(
        std::string(R"({"type":"Parallel","merge":")") + merge + R"(","branches":)" + branches + "}", {2});
    const Layer& par = *net->layers()[0];
    par.variables()[0]->assign(Tensor::from_floats(Shape{2, 2}, std::vector<float>{1, 0, 0, 1}));
    par.variables()[1]->assign(Tensor::from_floats(Shape{2, 2}, std::vector<float>{2, 0, 0, 3}));
    auto g = std::make_shared<Graph>();
    Output x = g->placeholder("x", DType::kF32, Shape{-1, 2});
    Output y = net->call(*g, x, false, "cpu");
    ThreadPool inter(2), intra(1);
    Session s(g, inter, intra);
    std::vector<Feed> feeds{{x, Tensor::from_floats(Shape{1, 2}, std::vector<float>{1, 2})}};
    std::vector<Output> fetches{y};
    const std::vector<float> out = s.run(feeds, fetches)[0].to_floats();
    if (merge == "concat")
      CHECK(out == std::vector<float>{1, 2, 2, 6});
    else
      CHECK(out == std::vector<float>{3, 8});
  }
}

TEST_CASE("Parallel bad keys name their JSON path") {
  check_layer_spec_error(R"({"type":"Parallel","branches":[[{"type":"Dense","units":2}]]})", {3}, "layers[0].branches",
                         "at least 2 branches");
  check_layer_spec_error(
      R"({"type":"Parallel","branches":[[{"type":"Dense","units":2}],[{"type":"Dense","units":2}]],"merge":"mul"})",
      {3}, "layers[0].merge", "unknown value \"mul\" (known: add, concat)");
  check_layer_spec_error(
      R"({"type":"Parallel","merge":"add","branches":[[{"type":"Dense","units":2}],[{"type":"Dense","units":3}]]})",
      {3}, "layers[0]",
      "Parallel layer \"parallel\" merges by \"add\", which needs equal branch outputs, but branch 0 gives (None, 2) "
      "and branch 1 gives (None, 3)");
  check_layer_spec_error(R"({"type":"Parallel","branches":[[{"type":"Dense","units":2}],[]]})", {3},
                         "layers[0].branches[1]", "expected a non-empty list of layers");
  check_layer_spec_error(
      R"({"type":"Parallel","branches":[[{"type":"Dense","units":2}],[{"type":"Delay","ms":1},{"type":"Dense","units":-2}]]})",
      {3}, "layers[0].branches[1][1].units", "expected a positive integer, got -2");
  check_layer_spec_error(
      R"({"type":"Parallel","branches":[[{"type":"Dense","units":2,"name":"a"}],[{"type":"Dense","units":2,"name":"a"}]]})",
      {3}, "layers[0].branches[1][0].name", "duplicate layer name \"a\"");
  check_layer_spec_error(
      R"({"type":"Parallel","branches":[[{"type":"Conv1D","filters":1,"kernel_size":1}],[{"type":"Delay","ms":1}]]})",
      {3}, "layers[0].branches[0][0]", "Conv1D expects an input of shape (None, steps, channels), got (None, 3)");
  check_layer_spec_error(R"({"type":"Parallel","branches":[[{"type":"Delay","ms":1}],[{"type":"Delay","ms":1}]]})",
                         {2, 2}, "layers[0]", "merges by \"concat\", which needs flat branch outputs");
  // The branch at fault, and branch 0 beside it only when that is another branch.
  auto concat_message = [](const std::string& json_text, const Shape& input_shape) {
    return catch_spec_error([&] { build_one_layer(json_text, input_shape); }).message();
  };
  CHECK(concat_message(R"({"type":"Parallel","branches":[[{"type":"Delay","ms":1}],[{"type":"Flatten"}]]})", {2, 2})
            .ends_with("but branch 0 gives (None, 2, 2)"));
  CHECK(concat_message(R"({"type":"Parallel","branches":[[{"type":"Flatten"}],[{"type":"Delay","ms":1}]]})", {2, 2})
            .ends_with("but branch 1 gives (None, 2, 2) (branch 0 gives (None, 4))"));
  check_layer_spec_error(
      R"({"type":"Parallel","branches":[[{"type":"Delay","ms":1}],[{"type":"Delay","ms":1}]],"brances":1})", {2},
      "layers[0].brances", "unknown key");
}

// The two Delay nodes of a run, as profiled.
std::vector<ProfileEvent> delay_events(int inter_threads) {
  auto net = build_one_layer(
      R"({"type":"Parallel","merge":"add","branches":[[{"type":"Delay","ms":50}],[{"type":"Delay","ms":50}]]})", {2});
  auto g = std::make_shared<Graph>();
  Output x = g->placeholder("x", DType::kF32, Shape{-1, 2});
  Output y = net->call(*g, x, false, "cpu");
  ThreadPool inter(inter_threads), intra(1);
  Session s(g, inter, intra);
  Profiler profiler;
  RunOptions ro;
  ro.profiler = &profiler;
  std::vector<Feed> feeds{{x, Tensor::from_floats(Shape{1, 2}, std::vector<float>{1, 2})}};
  std::vector<Output> fetches{y};
  CHECK(s.run(feeds, fetches, {}, ro)[0].to_floats() == std::vector<float>{2, 4});
  std::vector<ProfileEvent> out;
  for (const auto& e : profiler.events())
    if (e.op == "Delay") out.push_back(e);
  return out;
}

TEST_CASE("Parallel branches run concurrently with two inter-op threads and in turn with one") {
  const auto two = delay_events(2);
  REQUIRE(two.size() == 2);
  CHECK(two[0].layer == "parallel");
  // Each started before the other ended: they overlapped.
  CHECK(two[0].start_us < two[1].end_us);
  CHECK(two[1].start_us < two[0].end_us);
  CHECK(two[0].lane != two[1].lane);

  const auto one = delay_events(1);
  REQUIRE(one.size() == 2);
  CHECK((one[0].end_us <= one[1].start_us || one[1].end_us <= one[0].start_us));
}

}  // namespace
}  // namespace tctl
