// SimpleRNN: the shared layer checks (gradients, Keras round trip, ONNX's RNN, FLOPs) with tanh and relu,
// Keras' parameter count, and the outputs against the cell written out in double precision.
#include <doctest/doctest.h>

#include "models/nn/layers/layer_test_util.h"
#include "models/nn/layers/recurrent_test_util.h"

namespace tctl {
namespace {

using testing::build_one_layer;
using testing::check_layer;
using testing::check_layer_spec_error;
using testing::run_net;

TEST_CASE("SimpleRNN passes the layer checks with tanh and relu") {
  auto checked =
      check_layer(R"({"type":"SimpleRNN","units":4})", {5, 3}, {.flops_per_example = 2.0 * (5 * 3 * 4 + 5 * 4 * 4)});
  CHECK(checked.output_shape == Shape{4});
  CHECK(checked.layer().param_count() == 32);  // Keras: 3 x 4 + 4 x 4 + 4
  CHECK(checked.layer().name() == "simple_rnn");
  check_layer(R"({"type":"SimpleRNN","units":3,"activation":"relu","return_sequences":true})", {4, 2});
  check_layer(R"({"type":"SimpleRNN","units":3,"go_backwards":true,"return_sequences":true})", {4, 2});
}

TEST_CASE("SimpleRNN computes h = activation(x W + h U + b) at every step") {
  testing::check_recurrent_reference("SimpleRNN", "tanh");
  testing::check_recurrent_reference("SimpleRNN", "relu", R"(,"activation":"relu")");
}

TEST_CASE("SimpleRNN's recurrent_dropout drops the same units of h_{t-1} at every step of a sequence") {
  check_layer(R"({"type":"SimpleRNN","units":3,"recurrent_dropout":0.5,"return_sequences":true})", {4, 2},
              {.training = true});
  // relu(x_t + m h_{t-1}) with U the identity and x_t = 1: a kept unit (m = 2 at rate 0.5) doubles its state
  // at every step and reaches 2^T - 1; a dropped one (m = 0) stays at 1. A mask drawn per step would give
  // values in between.
  constexpr std::int64_t kUnits = 16, kSteps = 6, kBatch = 8;
  auto net = build_one_layer(
      R"({"type":"SimpleRNN","units":16,"activation":"relu","recurrent_dropout":0.5,"use_bias":false})", {kSteps, 1});
  std::vector<float> identity(kUnits * kUnits, 0.0f);
  for (std::int64_t j = 0; j < kUnits; ++j) identity[static_cast<std::size_t>(j * kUnits + j)] = 1.0f;
  net->variables()[0]->assign(Tensor::from_floats(Shape{1, kUnits}, std::vector<float>(kUnits, 1.0f)));
  net->variables()[1]->assign(Tensor::from_floats(Shape{kUnits, kUnits}, identity));
  const Tensor x = Tensor::from_floats(Shape{kBatch, kSteps, 1}, std::vector<float>(kBatch * kSteps, 1.0f));
  const std::vector<float> trained = run_net(*net, x, true).to_floats();
  int kept = 0, dropped = 0;
  for (float v : trained) {
    kept += v == 63.0f;
    dropped += v == 1.0f;
  }
  CHECK(kept + dropped == kBatch * kUnits);
  // 128 fair draws: each side within 64 +- 24 (about 4 standard deviations).
  CHECK(kept > 40);
  CHECK(dropped > 40);
  // Examples draw their own masks.
  CHECK(!std::equal(trained.begin(), trained.begin() + kUnits, trained.begin() + kUnits));
  // Inference keeps every unit: h_T = T.
  for (float v : run_net(*net, x).to_floats()) CHECK(v == static_cast<float>(kSteps));
}

TEST_CASE("SimpleRNN takes tanh or relu") {
  check_layer_spec_error(R"({"type":"SimpleRNN","units":4,"activation":"sigmoid"})", {5, 3}, "layers[0].activation",
                         "");
}

}  // namespace
}  // namespace tctl
