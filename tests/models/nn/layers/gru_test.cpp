// GRU (reset_after, Keras 3's form): the shared layer checks (gradients, Keras round trip, ONNX's GRU,
// FLOPs), Keras' parameter count, the outputs against the cell written out in double precision, and what it
// refuses.
#include <doctest/doctest.h>

#include "models/nn/layers/layer_test_util.h"
#include "models/nn/layers/recurrent_test_util.h"

namespace tctl {
namespace {

using testing::check_layer;
using testing::check_layer_spec_error;

TEST_CASE("GRU passes the layer checks, last output and whole sequence, forwards and backwards") {
  auto checked =
      check_layer(R"({"type":"GRU","units":4})", {5, 3}, {.flops_per_example = 2.0 * (5 * 3 * 12 + 5 * 4 * 12)});
  CHECK(checked.output_shape == Shape{4});
  CHECK(checked.layer().param_count() == 108);  // Keras: 3 (3 x 4 + 4 x 4 + 2 x 4), two biases
  CHECK(checked.layer().name() == "gru");
  CHECK(check_layer(R"({"type":"GRU","units":3,"return_sequences":true,"go_backwards":true})", {4, 2}).output_shape ==
        Shape{4, 3});
  check_layer(R"({"type":"GRU","units":2,"use_bias":false})", {3, 2});
  check_layer(R"({"type":"GRU","units":3,"dropout":0.25,"return_sequences":true})", {4, 2}, {.training = true});
  check_layer(R"({"type":"GRU","units":3,"recurrent_dropout":0.4,"go_backwards":true})", {4, 2}, {.training = true});
}

TEST_CASE("GRU computes Keras' cell with reset_after: every step against the equations in double precision") {
  testing::check_recurrent_reference("GRU", "gru");
}

TEST_CASE("GRU refuses reset_after false") {
  check_layer_spec_error(R"({"type":"GRU","units":4,"reset_after":false})", {5, 3}, "layers[0].reset_after",
                         "only reset_after true");
}

}  // namespace
}  // namespace tctl
