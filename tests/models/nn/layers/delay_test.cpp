// Delay: the shared layer checks, the identity it computes, and one case per bad key.
#include <doctest/doctest.h>

#include "core/errors.h"
#include "models/nn/layers/layer_test_util.h"

namespace tctl {
namespace {

using testing::build_one_layer;
using testing::check_layer;
using testing::check_layer_spec_error;

TEST_CASE("Delay passes the layer checks") {
  auto checked = check_layer(R"({"type":"Delay","ms":0})", {5});
  CHECK(checked.output_shape == Shape{5});
  CHECK(checked.layer().name() == "delay");
  CHECK(checked.layer().param_count() == 0);
  check_layer(R"({"type":"Delay","ms":0})", {2, 3}, {.training = true});
}

TEST_CASE("Delay adds one Delay node in training and inference and outputs its input") {
  auto net = build_one_layer(R"({"type":"Delay","ms":1.5})", {3});
  CHECK(net->layers()[0]->to_json() == nlohmann::json{{"type", "Delay"}, {"name", "delay"}, {"ms", 1.5}});
  for (bool training : {false, true}) {
    auto g = std::make_shared<Graph>();
    Output x = g->placeholder("x", DType::kF32, Shape{-1, 3});
    Output y = net->call(*g, x, training, "cpu");
    CHECK(g->node(y).op->name == "Delay");
    CHECK(g->node(y).attrs.f("ms") == 1.5);
    ThreadPool inter(1), intra(1);
    Session s(g, inter, intra);
    std::vector<Feed> feeds{{x, Tensor::from_floats(Shape{1, 3}, std::vector<float>{1, 2, 3})}};
    std::vector<Output> fetches{y};
    CHECK(s.run(feeds, fetches)[0].to_floats() == std::vector<float>{1, 2, 3});
  }
}

TEST_CASE("Delay bad keys name their JSON path") {
  check_layer_spec_error(R"({"type":"Delay","ms":-1})", {4}, "layers[0].ms",
                         "expected a number of milliseconds in [0, 60000], got -1");
  check_layer_spec_error(R"({"type":"Delay","ms":60001})", {4}, "layers[0].ms", "in [0, 60000], got 60001");
  check_layer_spec_error(R"({"type":"Delay","ms":"20"})", {4}, "layers[0].ms", "expected a number");
  check_layer_spec_error(R"({"type":"Delay"})", {4}, "layers[0]", "missing required key \"ms\"");
  check_layer_spec_error(R"({"type":"Delay","ms":1,"seconds":1})", {4}, "layers[0].seconds", "unknown key");
}

}  // namespace
}  // namespace tctl
