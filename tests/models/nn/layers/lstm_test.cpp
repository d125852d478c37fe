// LSTM: the shared layer checks (gradients, Keras round trip, ONNX's LSTM, FLOPs) in each of its forms,
// Keras' parameter count, the outputs against the cell written out in double precision, and what it refuses.
#include <doctest/doctest.h>

#include "models/nn/layers/layer_test_util.h"
#include "models/nn/layers/recurrent_test_util.h"

namespace tctl {
namespace {

using testing::check_layer;
using testing::check_layer_spec_error;

TEST_CASE("LSTM passes the layer checks, last output and whole sequence, forwards and backwards") {
  // FLOPs per example: the input product, 5 steps x 3 features x 16 columns, and the recurrent one, 5 x 4 x
  // 16, two each.
  auto checked =
      check_layer(R"({"type":"LSTM","units":4})", {5, 3}, {.flops_per_example = 2.0 * (5 * 3 * 16 + 5 * 4 * 16)});
  CHECK(checked.output_shape == Shape{4});
  CHECK(checked.layer().param_count() == 128);  // Keras: 4 (3 x 4 + 4 x 4 + 4)
  CHECK(checked.layer().name() == "lstm");
  CHECK(check_layer(R"({"type":"LSTM","units":3,"return_sequences":true})", {4, 2}).output_shape == Shape{4, 3});
  check_layer(R"({"type":"LSTM","units":3,"return_sequences":true,"go_backwards":true})", {4, 2});
  check_layer(R"({"type":"LSTM","units":2,"go_backwards":true,"use_bias":false})", {3, 2});
  // Input dropout in training: the same mask in the forward pass, the gradient and the differences.
  check_layer(R"({"type":"LSTM","units":3,"dropout":0.25})", {4, 2}, {.training = true});
  // Recurrent dropout: the forward kernel, d h_{t-1} and dU all draw the same mask.
  check_layer(R"({"type":"LSTM","units":3,"recurrent_dropout":0.4,"return_sequences":true})", {4, 2},
              {.training = true});
}

TEST_CASE("LSTM computes Keras' cell: every step against the equations in double precision") {
  testing::check_recurrent_reference("LSTM", "lstm");
}

TEST_CASE("LSTM refuses what it does not compute") {
  check_layer_spec_error(R"({"type":"LSTM","units":4,"activation":"relu"})", {5, 3}, "layers[0].activation", "tanh");
  check_layer_spec_error(R"({"type":"LSTM","units":4,"recurrent_dropout":1})", {5, 3}, "layers[0].recurrent_dropout",
                         "");
  check_layer_spec_error(R"({"type":"LSTM","units":4})", {5}, "layers[0]", "(None, steps, features)");
  // Sizes past tensorctl's limits, refused before anything overflows or is allocated.
  check_layer_spec_error(R"({"type":"LSTM","units":4611686018427387904})", {5, 3}, "layers[0].units",
                         "larger than the 2^31 elements");
  check_layer_spec_error(R"({"type":"LSTM","units":16})", {1000000000, 4}, "layers[0].units",
                         "need a workspace larger than the 2^36 elements");
}

}  // namespace
}  // namespace tctl
