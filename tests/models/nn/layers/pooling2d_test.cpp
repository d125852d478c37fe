// MaxPooling2D and AveragePooling2D: the shared layer checks, strides defaults, values, and bad keys.
#include <doctest/doctest.h>

#include "core/errors.h"
#include "models/nn/layers/layer_test_util.h"

namespace tctl {
namespace {

using testing::build_one_layer;
using testing::check_layer;
using testing::check_layer_spec_error;

TEST_CASE("pooling layers pass the layer checks") {
  for (const std::string type : {"MaxPooling2D", "AveragePooling2D"}) {
    CAPTURE(type);
    // One operation per element a window covers: 2 x 3 x 2 outputs of 2 x 2 windows.
    auto checked = check_layer(R"({"type":")" + type + R"("})", {4, 6, 2}, {.flops_per_example = 48});
    CHECK(checked.output_shape == Shape{2, 3, 2});
    CHECK(checked.layer().param_count() == 0);
    CHECK(check_layer(R"({"type":")" + type + R"(","pool_size":[3,2],"strides":1,"padding":"same"})", {5, 4, 3})
              .output_shape == Shape{5, 4, 3});
    CHECK(check_layer(R"({"type":")" + type + R"(","pool_size":2,"padding":"same"})", {5, 3, 1}).output_shape ==
          Shape{3, 2, 1});
  }
  CHECK(build_one_layer(R"({"type":"MaxPooling2D"})", {4, 4, 1})->layers()[0]->name() == "max_pooling2d");
  CHECK(build_one_layer(R"({"type":"AveragePooling2D"})", {4, 4, 1})->layers()[0]->name() == "average_pooling2d");
}

TEST_CASE("pooling strides default to the pool size, also when null") {
  for (const std::string spec : {R"({"type":"MaxPooling2D","pool_size":[3,2]})",
                                 R"({"type":"MaxPooling2D","pool_size":[3,2],"strides":null})"}) {
    auto net = build_one_layer(spec, {6, 6, 1});
    CHECK(net->output_shape() == Shape{2, 3, 1});
    CHECK(net->layers()[0]->to_json() == nlohmann::json{{"type", "MaxPooling2D"},
                                                        {"name", "max_pooling2d"},
                                                        {"pool_size", {3, 2}},
                                                        {"strides", {3, 2}},
                                                        {"padding", "valid"}});
  }
}

TEST_CASE("pooling layers compute the window maximum and mean") {
  Tensor x = Tensor::from_floats(Shape{1, 2, 4, 1}, std::vector<float>{1, 5, 2, 0, 3, 4, 8, 6});
  CHECK(testing::run_net(*build_one_layer(R"({"type":"MaxPooling2D"})", {2, 4, 1}), x).to_floats() ==
        std::vector<float>{5, 8});
  CHECK(testing::run_net(*build_one_layer(R"({"type":"AveragePooling2D"})", {2, 4, 1}), x).to_floats() ==
        std::vector<float>{3.25f, 4});
}

TEST_CASE("pooling bad keys name their JSON path") {
  const Shape in{4, 5, 2};
  check_layer_spec_error(R"({"type":"MaxPooling2D","pool_size":0})", in, "layers[0].pool_size",
                         "expected a positive integer of at most 65536 or a list of two, got 0");
  check_layer_spec_error(R"({"type":"AveragePooling2D","pool_size":[2,0]})", in, "layers[0].pool_size",
                         "a list of two");
  check_layer_spec_error(R"({"type":"MaxPooling2D","strides":-1})", in, "layers[0].strides",
                         "expected a positive integer");
  check_layer_spec_error(R"({"type":"MaxPooling2D","padding":"causal"})", in, "layers[0].padding",
                         "known: valid, same");
  check_layer_spec_error(R"({"type":"MaxPooling2D","pool_size":5})", in, "layers[0].pool_size",
                         "5x5 is larger than the input (None, 4, 5, 2) with \"valid\" padding");
  check_layer_spec_error(R"({"type":"AveragePooling2D","data_format":"channels_first"})", in, "layers[0].data_format",
                         "unknown key");
  check_layer_spec_error(R"({"type":"AveragePooling2D"})", {8}, "layers[0]",
                         "AveragePooling2D expects an input of shape (None, height, width, channels), got (None, 8)");
}

}  // namespace
}  // namespace tctl
