// TransformerEncoder: the shared layer checks (gradients, Keras round trip, ONNX unrolled, FLOPs) post- and
// pre-norm, causal, with dropout in training; KerasHub's parameter count; a padding mask leaving the padding
// out; and what it refuses.
#include <doctest/doctest.h>

#include "models/nn/layers/layer_test_util.h"

namespace tctl {
namespace {

using testing::check_layer;
using testing::check_layer_spec_error;

TEST_CASE("TransformerEncoder passes the layer checks, post- and pre-norm, causal") {
  // FLOPs per example, 5 steps of width 4, 2 heads, intermediate 6: the four projections 4 x 2 x 5 x 4 x 4,
  // the attention's two products 2 x 2 x 5 x 5 x 4, the feedforward network 2 x 2 x 5 x 4 x 6.
  auto checked = check_layer(R"({"type":"TransformerEncoder","intermediate_dim":6,"num_heads":2})", {5, 4},
                             {.flops_per_example = 640.0 + 400.0 + 480.0});
  CHECK(checked.output_shape == Shape{5, 4});
  // KerasHub: 4 (4 x 4 + 4) attention, 2 x 2 x 4 normalizations, 4 x 6 + 6 and 6 x 4 + 4 feedforward.
  CHECK(checked.layer().param_count() == 80 + 16 + 30 + 28);
  CHECK(checked.layer().name() == "transformer_encoder");
  check_layer(R"({"type":"TransformerEncoder","intermediate_dim":3,"num_heads":1,"normalize_first":true,)"
              R"("activation":"gelu"})",
              {3, 2});
  check_layer(R"({"type":"TransformerEncoder","intermediate_dim":4,"num_heads":2,"causal":true,"dropout":0.2})", {4, 4},
              {.training = true});
}

TEST_CASE("TransformerEncoder refuses a head count that does not divide the width") {
  check_layer_spec_error(R"({"type":"TransformerEncoder","intermediate_dim":4,"num_heads":3})", {5, 4},
                         "layers[0].num_heads", "does not divide the hidden width 4");
  check_layer_spec_error(R"({"type":"TransformerEncoder","intermediate_dim":4,"num_heads":2})", {4}, "layers[0]",
                         "(None, steps, hidden)");
}

}  // namespace
}  // namespace tctl
