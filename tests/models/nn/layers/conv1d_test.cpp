// Conv1D: the shared layer checks, its output against a direct sum, Keras' sizes written as lists, bad keys.
#include <doctest/doctest.h>

#include "models/nn/layers/layer_test_util.h"

namespace tctl {
namespace {

using testing::build_one_layer;
using testing::check_layer;
using testing::check_layer_spec_error;
using testing::run_net;

TEST_CASE("Conv1D passes the layer checks") {
  // 2 * kernel_size * in * filters per output step: 4 steps of 2 * 3 * 2 * 4.
  auto checked = check_layer(R"({"type":"Conv1D","filters":4,"kernel_size":3})", {6, 2}, {.flops_per_example = 192});
  CHECK(checked.output_shape == Shape{4, 4});
  CHECK(checked.layer().param_count() == 3 * 2 * 4 + 4);  // Keras: kernel_size * in * filters + filters
  CHECK(checked.layer().name() == "conv1d");
  CHECK(check_layer(R"({"type":"Conv1D","filters":2,"kernel_size":2,"strides":2,"padding":"same",)"
                    R"("activation":"relu","use_bias":false})",
                    {5, 3})
            .output_shape == Shape{3, 2});
}

TEST_CASE("Conv1D sums kernel times window over steps and channels, plus the bias") {
  auto net = build_one_layer(R"({"type":"Conv1D","filters":1,"kernel_size":2,"bias_initializer":"zeros"})", {3, 2});
  // kernel [2, 2, 1]: step 0 weights (1, 2), step 1 weights (3, 4).
  net->variables()[0]->assign(Tensor::from_floats(Shape{2, 2, 1}, std::vector<float>{1, 2, 3, 4}));
  const Tensor x = Tensor::from_floats(Shape{1, 3, 2}, std::vector<float>{1, 0, 0, 1, 2, -1});
  // Output step 0: 1*1 + 2*0 + 3*0 + 4*1 = 5; step 1: 1*0 + 2*1 + 3*2 + 4*(-1) = 4.
  CHECK(run_net(*net, x).to_floats() == std::vector<float>{5, 4});
}

TEST_CASE("Conv1D with causal padding sees each step and the ones before it, as many steps out as in") {
  // 6 steps out of 6 in, each output 2 * 3 * 2 * 4 FLOPs.
  CHECK(check_layer(R"({"type":"Conv1D","filters":4,"kernel_size":3,"padding":"causal"})", {6, 2},
                    {.flops_per_example = 288})
            .output_shape == Shape{6, 4});
  check_layer(R"({"type":"Conv1D","filters":2,"kernel_size":2,"strides":2,"padding":"causal"})", {5, 1});
  auto net = build_one_layer(R"({"type":"Conv1D","filters":1,"kernel_size":2,"padding":"causal"})", {3, 1});
  net->variables()[0]->assign(Tensor::from_floats(Shape{2, 1, 1}, std::vector<float>{10, 1}));
  // Step t: 10 x[t - 1] + x[t], with x[-1] = 0: the output never sees a later step.
  const Tensor x = Tensor::from_floats(Shape{1, 3, 1}, std::vector<float>{1, 2, 3});
  CHECK(run_net(*net, x).to_floats() == std::vector<float>{1, 12, 23});
}

TEST_CASE("Conv1D with a dilation_rate sums taps that many steps apart, under each padding") {
  // valid: 8 - (3 - 1) * 2 = 4 steps out; same and causal: 8.
  CHECK(check_layer(R"({"type":"Conv1D","filters":3,"kernel_size":3,"dilation_rate":2})", {8, 2}).output_shape ==
        Shape{4, 3});
  CHECK(check_layer(R"({"type":"Conv1D","filters":2,"kernel_size":2,"dilation_rate":3,"padding":"same",)"
                    R"("activation":"tanh"})",
                    {7, 2})
            .output_shape == Shape{7, 2});
  CHECK(check_layer(R"({"type":"Conv1D","filters":2,"kernel_size":3,"dilation_rate":[2],"padding":"causal",)"
                    R"("use_bias":false})",
                    {9, 1})
            .output_shape == Shape{9, 2});
  // Taps (1, 10, 100) two steps apart on x = 1 .. 7, as sums written out.
  std::vector<float> x_values(7);
  for (std::size_t i = 0; i < x_values.size(); ++i) x_values[i] = static_cast<float>(i + 1);
  const Tensor x = Tensor::from_floats(Shape{1, 7, 1}, x_values);
  auto taps = [&](const std::string& padding) {
    auto net = build_one_layer(R"({"type":"Conv1D","filters":1,"kernel_size":3,"dilation_rate":2,"use_bias":false,)"
                               R"("padding":")" +
                                   padding + R"("})",
                               {7, 1});
    net->variables()[0]->assign(Tensor::from_floats(Shape{3, 1, 1}, std::vector<float>{1, 10, 100}));
    return run_net(*net, x).to_floats();
  };
  // valid: y[t] = x[t] + 10 x[t + 2] + 100 x[t + 4].
  CHECK(taps("valid") == std::vector<float>{531, 642, 753});
  // causal: y[t] = x[t - 4] + 10 x[t - 2] + 100 x[t], zeros before the first step.
  CHECK(taps("causal") == std::vector<float>{100, 200, 310, 420, 531, 642, 753});
  // same: two zero steps each side, y[t] = x[t - 2] + 10 x[t] + 100 x[t + 2].
  CHECK(taps("same") == std::vector<float>{310, 420, 531, 642, 753, 64, 75});
}

TEST_CASE("Conv1D takes sizes as a number or a list of one, and refuses what it cannot do yet") {
  auto net = build_one_layer(R"({"type":"Conv1D","filters":1,"kernel_size":[3],"strides":[2]})", {7, 1});
  CHECK(net->output_shape() == Shape{3, 1});
  CHECK(net->layers()[0]->to_json()["kernel_size"] == 3);
  check_layer_spec_error(R"({"type":"Conv1D","filters":1})", {4, 1}, "layers[0]", "kernel_size");
  check_layer_spec_error(R"({"type":"Conv1D","filters":1,"kernel_size":[2,2]})", {4, 1}, "layers[0].kernel_size",
                         "a list of one");
  check_layer_spec_error(R"({"type":"Conv1D","filters":1,"kernel_size":5})", {4, 1}, "layers[0].kernel_size",
                         "5 is longer than the input's 4 steps");
  check_layer_spec_error(R"({"type":"Conv1D","filters":1,"kernel_size":2})", {4, 4, 1}, "layers[0]",
                         "Conv1D expects an input of shape (None, steps, channels), got (None, 4, 4, 1)");
  check_layer_spec_error(R"({"type":"Conv1D","filters":1,"kernel_size":2,"strides":2,"dilation_rate":2})", {8, 1},
                         "layers[0].dilation_rate", "needs strides 1");
  check_layer_spec_error(R"({"type":"Conv1D","filters":1,"kernel_size":3,"dilation_rate":2})", {4, 1},
                         "layers[0].dilation_rate", "spans 5 steps, more than the input's 4");
}

}  // namespace
}  // namespace tctl
