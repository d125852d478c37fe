// GlobalAveragePooling1D/2D and GlobalMaxPooling1D/2D: the shared layer checks, values, keepdims, bad input.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "models/nn/layers/layer_test_util.h"

namespace tctl {
namespace {

using testing::build_one_layer;
using testing::check_layer;
using testing::check_layer_spec_error;
using testing::run_net;

TEST_CASE("global pooling layers pass the layer checks") {
  // ignore_mask is tensorctl's key (import-keras writes it where a mask reaches the layer), so a spec with
  // it does not come back from a Keras file.
  for (const std::string spec :
       {R"("GlobalAveragePooling1D")", R"("GlobalMaxPooling1D", "ignore_mask": true)", R"("GlobalMaxPooling1D")"}) {
    CAPTURE(spec);
    const bool keras = spec.find("ignore_mask") == std::string::npos;
    // One operation per input element: 5 steps of 3 channels.
    auto checked = check_layer(R"({"type":)" + spec + "}", {5, 3}, {.keras = keras, .flops_per_example = 15});
    CHECK(checked.output_shape == Shape{3});
    CHECK(checked.layer().param_count() == 0);
    CHECK(check_layer(R"({"type":)" + spec + R"(,"keepdims":true})", {4, 2}, {.keras = keras}).output_shape ==
          Shape{1, 2});
  }
  for (const std::string type : {"GlobalAveragePooling2D", "GlobalMaxPooling2D"}) {
    CAPTURE(type);
    CHECK(check_layer(R"({"type":")" + type + R"("})", {3, 4, 2}, {.flops_per_example = 24}).output_shape == Shape{2});
    CHECK(check_layer(R"({"type":")" + type + R"(","keepdims":true})", {2, 3, 2}).output_shape == Shape{1, 1, 2});
  }
  CHECK(build_one_layer(R"({"type":"GlobalMaxPooling1D"})", {4, 1})->layers()[0]->name() == "global_max_pooling1d");
  CHECK(build_one_layer(R"({"type":"GlobalAveragePooling2D"})", {2, 2, 1})->layers()[0]->name() ==
        "global_average_pooling2d");
}

TEST_CASE("Keras' GlobalMaxPooling1D takes no mask: after a masked embedding it imports with ignore_mask") {
  nlohmann::json doc = nlohmann::json::parse(R"({"class_name": "Sequential", "config": {"name": "m", "layers": [
      {"class_name": "InputLayer", "config": {"batch_input_shape": [null, 5]}},
      {"class_name": "Embedding", "config": {"input_dim": 9, "output_dim": 3, "mask_zero": true}},
      {"class_name": "GlobalMaxPooling1D", "config": {"name": "pool", "keepdims": false}}]}})");
  const nlohmann::json want = nlohmann::json::parse(R"({"type": "GlobalMaxPooling1D", "name": "pool", "keepdims": false,
      "ignore_mask": true})");
  const nlohmann::json spec = keras_to_spec(doc, "keras.json", keras_layer_mappings());
  CHECK(spec.at("layers").at(1) == want);
  CHECK(Sequential::from_json(spec, "keras.json", "", 1).layers()[1]->to_json() == want);
  doc["config"]["layers"][1]["config"]["mask_zero"] = false;
  CHECK_FALSE(keras_to_spec(doc, "keras.json", keras_layer_mappings()).at("layers").at(1).contains("ignore_mask"));
}

TEST_CASE("global pooling takes each channel's mean or maximum over the steps or pixels") {
  // Two examples of three steps and two channels.
  const Tensor x = Tensor::from_floats(Shape{2, 3, 2}, std::vector<float>{1, -1, 4, -5, 7, -3, 0, 2, 0, 8, -6, 2});
  CHECK(run_net(*build_one_layer(R"({"type":"GlobalAveragePooling1D"})", {3, 2}), x).to_floats() ==
        std::vector<float>{4, -3, -2, 4});
  CHECK(run_net(*build_one_layer(R"({"type":"GlobalMaxPooling1D"})", {3, 2}), x).to_floats() ==
        std::vector<float>{7, -1, 0, 8});
  // The same numbers as one 3x1 image each.
  const Tensor image = x.reshaped(Shape{2, 3, 1, 2});
  CHECK(run_net(*build_one_layer(R"({"type":"GlobalMaxPooling2D"})", {3, 1, 2}), image).to_floats() ==
        std::vector<float>{7, -1, 0, 8});
  // A NaN is the maximum, as TensorFlow's max reduction keeps it.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor with_nan = Tensor::from_floats(Shape{1, 3, 1}, std::vector<float>{1, nan, 2});
  CHECK(std::isnan(run_net(*build_one_layer(R"({"type":"GlobalMaxPooling1D"})", {3, 1}), with_nan).to_floats()[0]));
}

TEST_CASE("global pooling refuses an input of the wrong rank, naming the layer") {
  check_layer_spec_error(R"({"type":"GlobalAveragePooling1D"})", {8}, "layers[0]",
                         "GlobalAveragePooling1D takes inputs of 2 dimensions besides the batch (steps, channels)");
  check_layer_spec_error(R"({"type":"GlobalMaxPooling2D"})", {4, 8}, "layers[0]", "(height, width, channels)");
  check_layer_spec_error(R"({"type":"GlobalMaxPooling2D","keepdims":1})", {2, 2, 1}, "layers[0].keepdims",
                         "true or false");
}

}  // namespace
}  // namespace tctl
