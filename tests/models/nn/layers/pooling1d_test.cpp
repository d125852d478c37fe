// MaxPooling1D and AveragePooling1D: the shared layer checks, values, strides defaults, bad input.
#include <doctest/doctest.h>

#include "models/nn/layers/layer_test_util.h"

namespace tctl {
namespace {

using testing::build_one_layer;
using testing::check_layer;
using testing::check_layer_spec_error;
using testing::run_net;

TEST_CASE("1-D pooling layers pass the layer checks") {
  for (const std::string type : {"MaxPooling1D", "AveragePooling1D"}) {
    CAPTURE(type);
    // One operation per element a window covers: 3 outputs of 2 steps, 2 channels.
    auto checked = check_layer(R"({"type":")" + type + R"("})", {6, 2}, {.flops_per_example = 12});
    CHECK(checked.output_shape == Shape{3, 2});
    CHECK(checked.layer().param_count() == 0);
    CHECK(
        check_layer(R"({"type":")" + type + R"(","pool_size":3,"strides":1,"padding":"same"})", {5, 1}).output_shape ==
        Shape{5, 1});
  }
}

TEST_CASE("1-D pooling takes the window maximum and mean; strides default to the pool size, also when null") {
  const Tensor x = Tensor::from_floats(Shape{1, 4, 1}, std::vector<float>{1, 5, 2, 0});
  CHECK(run_net(*build_one_layer(R"({"type":"MaxPooling1D"})", {4, 1}), x).to_floats() == std::vector<float>{5, 2});
  CHECK(
      run_net(*build_one_layer(R"({"type":"AveragePooling1D","pool_size":2,"strides":null})", {4, 1}), x).to_floats() ==
      std::vector<float>{3, 1});
  CHECK(build_one_layer(R"({"type":"MaxPooling1D","pool_size":[3]})", {9, 1})->output_shape() == Shape{3, 1});
}

TEST_CASE("1-D pooling refuses an input that is not [steps, channels] or a window longer than it") {
  check_layer_spec_error(R"({"type":"MaxPooling1D"})", {8}, "layers[0]",
                         "MaxPooling1D expects an input of shape (None, steps, channels), got (None, 8)");
  check_layer_spec_error(R"({"type":"AveragePooling1D","pool_size":4})", {3, 1}, "layers[0].pool_size",
                         "4 is longer than the input's 3 steps");
}

}  // namespace
}  // namespace tctl
