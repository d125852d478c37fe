// Conv2D: the shared layer checks for both paddings and strides, parameters, values, thread-count
// independence, and one case per bad key.
#include <doctest/doctest.h>

#include <cstring>

#include "core/errors.h"
#include "models/nn/layers/layer_test_util.h"

namespace tctl {
namespace {

using testing::build_one_layer;
using testing::check_layer;
using testing::check_layer_spec_error;

TEST_CASE("Conv2D passes the layer checks") {
  // 2 operations per output pixel (3 x 4 x 3) and kernel weight per filter (3 x 3 x 2).
  auto checked =
      check_layer(R"({"type":"Conv2D","filters":3,"kernel_size":3})", {5, 6, 2}, {.flops_per_example = 1296});
  CHECK(checked.output_shape == Shape{3, 4, 3});
  CHECK(checked.layer().name() == "conv2d");
  CHECK(check_layer(R"({"type":"Conv2D","filters":2,"kernel_size":[3,2],"strides":2,"padding":"same"})", {5, 7, 2})
            .output_shape == Shape{3, 4, 2});
  CHECK(
      check_layer(R"({"type":"Conv2D","filters":4,"kernel_size":[2,3],"strides":[1,2],"activation":"relu"})", {4, 7, 1})
          .output_shape == Shape{3, 3, 4});
  check_layer(R"({"type":"Conv2D","filters":2,"kernel_size":1,"use_bias":false,"kernel_initializer":"he_normal"})",
              {3, 3, 3});
  check_layer(R"({"type":"Conv2D","filters":2,"kernel_size":3,"padding":"same","activation":"gelu"})", {4, 4, 2});
}

TEST_CASE("Conv2D has kh * kw * C * F + F parameters in Keras' layout, kernel before bias") {
  auto net = build_one_layer(R"({"type":"Conv2D","filters":8,"kernel_size":[3,2]})", {6, 6, 4});
  const Layer& conv = *net->layers()[0];
  CHECK(conv.param_count() == 3 * 2 * 4 * 8 + 8);
  REQUIRE(conv.variables().size() == 2);
  CHECK(conv.variables()[0]->name() == "conv2d/kernel");
  CHECK(conv.variables()[0]->shape() == Shape{3, 2, 4, 8});
  CHECK(conv.variables()[1]->name() == "conv2d/bias");
  CHECK(conv.variables()[1]->shape() == Shape{8});
  // glorot_uniform with Keras' convolution fans: receptive field times channels.
  const double limit = std::sqrt(6.0 / (3 * 2 * 4 + 3 * 2 * 8));
  for (float w : conv.variables()[0]->read().to_floats()) CHECK(std::abs(w) <= limit);
  auto no_bias = build_one_layer(R"({"type":"Conv2D","filters":8,"kernel_size":3,"use_bias":false})", {6, 6, 4});
  CHECK(no_bias->layers()[0]->param_count() == 3 * 3 * 4 * 8);
}

TEST_CASE("Conv2D computes the correlation plus bias") {
  auto net = build_one_layer(R"({"type":"Conv2D","filters":2,"kernel_size":2})", {3, 3, 1});
  const Layer& conv = *net->layers()[0];
  // Filter 0 sums the window, filter 1 takes its top-left element.
  conv.variables()[0]->assign(Tensor::from_floats(Shape{2, 2, 1, 2}, std::vector<float>{1, 1, 1, 0, 1, 0, 1, 0}));
  conv.variables()[1]->assign(Tensor::from_floats(Shape{2}, std::vector<float>{0.5f, -1}));
  Tensor x = Tensor::from_floats(Shape{1, 3, 3, 1}, std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(testing::run_net(*net, x).to_floats() == std::vector<float>{12.5f, 0, 16.5f, 1, 24.5f, 3, 28.5f, 4});
}

TEST_CASE("Conv2D gives identical output bits on 1 and 2 intra-op threads") {
  auto net = build_one_layer(R"({"type":"Conv2D","filters":16,"kernel_size":3,"padding":"same","activation":"relu"})",
                             {8, 8, 3});
  // 16 images of 64 pixels: 16 blocks of 64 rows.
  Tensor x = testing::random_tensor(Shape{16, 8, 8, 3}, 3);
  Tensor one = testing::run_net(*net, x, false, 1), two = testing::run_net(*net, x, false, 2);
  REQUIRE(one.bytes() == two.bytes());
  CHECK(std::memcmp(one.raw_data(), two.raw_data(), one.bytes()) == 0);
}

TEST_CASE("Conv2D resolves every key in to_json") {
  auto net = build_one_layer(R"({"type":"Conv2D","filters":3,"kernel_size":3})", {5, 5, 1});
  CHECK(net->layers()[0]->to_json() == nlohmann::json{{"type", "Conv2D"},
                                                      {"name", "conv2d"},
                                                      {"filters", 3},
                                                      {"kernel_size", {3, 3}},
                                                      {"strides", {1, 1}},
                                                      {"padding", "valid"},
                                                      {"activation", "linear"},
                                                      {"use_bias", true},
                                                      {"kernel_initializer", "glorot_uniform"},
                                                      {"bias_initializer", "zeros"}});
}

TEST_CASE("Conv2D bad keys name their JSON path") {
  const Shape in{6, 5, 2};
  check_layer_spec_error(R"({"type":"Conv2D","kernel_size":3})", in, "layers[0]", "missing required key \"filters\"");
  check_layer_spec_error(R"({"type":"Conv2D","filters":2})", in, "layers[0]", "missing required key \"kernel_size\"");
  check_layer_spec_error(R"({"type":"Conv2D","filters":0,"kernel_size":3})", in, "layers[0].filters",
                         "expected a positive integer, got 0");
  check_layer_spec_error(R"({"type":"Conv2D","filters":2,"kernel_size":0})", in, "layers[0].kernel_size",
                         "expected a positive integer of at most 65536 or a list of two, got 0");
  check_layer_spec_error(R"({"type":"Conv2D","filters":2,"kernel_size":[3,-1]})", in, "layers[0].kernel_size",
                         "expected a positive integer of at most 65536 or a list of two");
  check_layer_spec_error(R"({"type":"Conv2D","filters":2,"kernel_size":[3]})", in, "layers[0].kernel_size",
                         "a list of two");
  check_layer_spec_error(R"({"type":"Conv2D","filters":2,"kernel_size":3,"strides":0})", in, "layers[0].strides",
                         "expected a positive integer of at most 65536 or a list of two, got 0");
  check_layer_spec_error(R"({"type":"Conv2D","filters":2,"kernel_size":3,"padding":"full"})", in, "layers[0].padding",
                         "unknown value \"full\" (known: valid, same)");
  check_layer_spec_error(R"({"type":"Conv2D","filters":2,"kernel_size":[3,6]})", in, "layers[0].kernel_size",
                         "3x6 is larger than the input (None, 6, 5, 2) with \"valid\" padding");
  check_layer_spec_error(R"({"type":"Conv2D","filters":2,"kernel_size":3,"activation":"swish"})", in,
                         "layers[0].activation", "unknown value \"swish\"");
  check_layer_spec_error(R"({"type":"Conv2D","filters":2,"kernel_size":3,"use_bias":1})", in, "layers[0].use_bias",
                         "expected true or false");
  check_layer_spec_error(R"({"type":"Conv2D","filters":2,"kernel_size":3,"kernel_initializer":"ones"})", in,
                         "layers[0].kernel_initializer",
                         "known: glorot_uniform, he_normal, orthogonal, uniform, zeros");
  check_layer_spec_error(R"({"type":"Conv2D","filters":2,"kernel_size":3,"dilation_rate":2})", in,
                         "layers[0].dilation_rate", "unknown key");
  check_layer_spec_error(R"({"type":"Conv2D","filters":2,"kernel_size":3})", {6, 5}, "layers[0]",
                         "Conv2D expects an input of shape (None, height, width, channels), got (None, 6, 5)");
  // "same" accepts a kernel larger than the input, as Keras does.
  CHECK(build_one_layer(R"({"type":"Conv2D","filters":2,"kernel_size":7,"padding":"same"})", in)->output_shape() ==
        Shape{6, 5, 2});
}

TEST_CASE("Conv2D fuses its convolution, bias and ReLU into one node; other activations follow it") {
  using testing::layer_op_names;
  using Ops = std::vector<std::string>;
  const Shape image{6, 6, 2};
  CHECK(layer_op_names(R"({"type":"Conv2D","filters":3,"kernel_size":3,"activation":"relu"})", image) ==
        Ops{"FusedConv2D"});
  CHECK(layer_op_names(R"({"type":"Conv2D","filters":3,"kernel_size":3})", image) == Ops{"FusedConv2D"});
  CHECK(layer_op_names(R"({"type":"Conv2D","filters":3,"kernel_size":3,"activation":"tanh"})", image) ==
        Ops{"FusedConv2D", "Tanh"});
  CHECK(layer_op_names(R"({"type":"Conv2D","filters":3,"kernel_size":3,"use_bias":false})", image) == Ops{"Conv2D"});
}

}  // namespace
}  // namespace tctl
