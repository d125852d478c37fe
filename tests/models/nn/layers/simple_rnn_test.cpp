// SimpleRNN: the shared layer checks (gradients, Keras round trip, ONNX's RNN, FLOPs) with tanh and relu,
// Keras' parameter count, and the outputs against the cell written out in double precision.
#include <doctest/doctest.h>

#include "models/nn/layers/layer_test_util.h"
#include "models/nn/layers/recurrent_test_util.h"

namespace tctl {
namespace {

using testing::check_layer;
using testing::check_layer_spec_error;

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

TEST_CASE("SimpleRNN takes tanh or relu") {
  check_layer_spec_error(R"({"type":"SimpleRNN","units":4,"activation":"sigmoid"})", {5, 3}, "layers[0].activation",
                         "");
}

}  // namespace
}  // namespace tctl
