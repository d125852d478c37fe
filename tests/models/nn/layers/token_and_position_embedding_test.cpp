// TokenAndPositionEmbedding: the shared layer checks on token ids, the sum it computes, a sequence shorter than
// sequence_length, and what it refuses.
#include <doctest/doctest.h>

#include "models/nn/layers/layer_test_util.h"

namespace tctl {
namespace {

using testing::build_one_layer;
using testing::check_layer;
using testing::check_layer_spec_error;
using testing::run_net;

constexpr const char* kSpec =
    R"({"type":"TokenAndPositionEmbedding","vocabulary_size":9,"sequence_length":6,"embedding_dim":4})";

TEST_CASE("TokenAndPositionEmbedding passes the layer checks on token ids") {
  auto checked = check_layer(kSpec, {6}, {.flops_per_example = 0, .token_ids = 9});
  CHECK(checked.output_shape == Shape{6, 4});
  CHECK(checked.layer().param_count() == 9 * 4 + 6 * 4);  // KerasHub: both tables
  CHECK(checked.layer().name() == "token_and_position_embedding");
  // A sequence shorter than sequence_length reads the first rows of the position table.
  CHECK(check_layer(kSpec, {4}, {.token_ids = 9}).output_shape == Shape{4, 4});
}

TEST_CASE("TokenAndPositionEmbedding adds row id of the token table and row l of the position table") {
  auto net = build_one_layer(kSpec, {3});
  const std::vector<float> tokens = net->variables()[0]->read().to_floats();
  const std::vector<float> positions = net->variables()[1]->read().to_floats();
  const Tensor ids = Tensor::from_floats(Shape{2, 3}, std::vector<float>{5, 0, 5, 8, 8, 1});
  const std::vector<float> y = run_net(*net, ids).to_floats();
  for (int n = 0; n < 2; ++n)
    for (int l = 0; l < 3; ++l)
      for (int j = 0; j < 4; ++j) {
        const auto id = static_cast<std::size_t>(ids.data<float>()[n * 3 + l]);
        CHECK(y[static_cast<std::size_t>((n * 3 + l) * 4 + j)] ==
              tokens[id * 4 + static_cast<std::size_t>(j)] + positions[static_cast<std::size_t>(l * 4 + j)]);
      }
}

TEST_CASE("TokenAndPositionEmbedding refuses a sequence longer than sequence_length and a non-sequence") {
  check_layer_spec_error(kSpec, {7}, "layers[0].sequence_length", "7 steps of input are more than sequence_length 6");
  check_layer_spec_error(kSpec, {2, 3}, "layers[0]", "takes a sequence of token ids, (None, steps)");
}

}  // namespace
}  // namespace tctl
