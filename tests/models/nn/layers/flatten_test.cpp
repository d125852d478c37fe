// Flatten: the shared layer checks, element order, and refusing keys it does not have.
#include <doctest/doctest.h>

#include "core/errors.h"
#include "models/nn/layers/layer_test_util.h"

namespace tctl {
namespace {

using testing::build_one_layer;
using testing::check_layer;
using testing::check_layer_spec_error;

TEST_CASE("Flatten passes the layer checks") {
  auto checked = check_layer(R"({"type":"Flatten"})", {2, 3, 4});
  CHECK(checked.output_shape == Shape{24});
  CHECK(checked.layer().name() == "flatten");
  CHECK(checked.layer().to_json() == nlohmann::json{{"type", "Flatten"}, {"name", "flatten"}});
  CHECK(check_layer(R"({"type":"Flatten"})", {5}).output_shape == Shape{5});
}

TEST_CASE("Flatten keeps row-major element order and a Dense layer can follow it") {
  nlohmann::json spec = {{"input_shape", {2, 2, 2}},
                         {"layers", {{{"type", "Flatten"}}, {{"type", "Dense"}, {"units", 3}}}}};
  Sequential net = Sequential::from_json(spec, "m.json", "", 1);
  CHECK(net.output_shape() == Shape{3});
  auto g = std::make_shared<Graph>();
  Output x = g->placeholder("x", DType::kF32, Shape{-1, 2, 2, 2});
  Output flat = net.layers()[0]->call(*g, x, false);
  ThreadPool inter(1), intra(1);
  Session s(g, inter, intra);
  const std::vector<float> values{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  std::vector<Feed> feeds{{x, Tensor::from_floats(Shape{2, 2, 2, 2}, values)}};
  std::vector<Output> fetches{flat};
  Tensor y = s.run(feeds, fetches)[0];
  CHECK(y.shape() == Shape{2, 8});
  CHECK(y.to_floats() == values);
}

TEST_CASE("Flatten rejects unknown keys") {
  check_layer_spec_error(R"({"type":"Flatten","data_format":"channels_last"})", {2, 2}, "layers[0].data_format",
                         "unknown key");
}

}  // namespace
}  // namespace tctl
