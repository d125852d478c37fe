// find_bad_token_id: the rows of a network whose inputs reach a layer that takes token ids unchanged,
// whichever layer that is.
#include "models/record/prepared_data.h"

#include <doctest/doctest.h>

namespace tctl {
namespace {

Sequential net_of(const std::string& first_layer, std::int64_t steps) {
  return Sequential::from_json(
      nlohmann::json::parse(R"({"input_shape": [)" + std::to_string(steps) + R"(], "layers": [)" + first_layer + "]}"),
      "model.json", "", 1);
}

TEST_CASE("find_bad_token_id checks the ids of either embedding and nothing of another first layer") {
  const Tensor x = Tensor::from_floats(Shape{2, 3}, std::vector<float>{0, 4, 2, 1, 4.5f, 5});
  const std::vector<std::string> names{"a", "b", "c"};
  for (const std::string layer : {R"({"type": "Embedding", "input_dim": 5, "output_dim": 2})",
                                  R"({"type": "TokenAndPositionEmbedding", "vocabulary_size": 5, )"
                                  R"("sequence_length": 3, "embedding_dim": 2})"}) {
    CAPTURE(layer);
    const Sequential net = net_of(layer, 3);
    const auto bad = find_bad_token_id(net, x, names);
    REQUIRE(bad.has_value());
    CHECK(bad->row == 1);
    CHECK(bad->message ==
          "column \"b\": 4.5 is not a token id of " + net.layers().front()->name() + " (a whole number in [0, 5))");
    CHECK(!find_bad_token_id(net, Tensor::from_floats(Shape{1, 3}, std::vector<float>{0, 4, 3}), names));
  }
  CHECK(!find_bad_token_id(net_of(R"({"type": "Dense", "units": 2})", 3), x, names));
  // After layers that only reshape, the ids are still the rows' values; after one that computes, they are not.
  const std::string embedding = R"({"type": "Embedding", "input_dim": 5, "output_dim": 2})";
  const Sequential reshaped =
      net_of(R"({"type": "Reshape", "target_shape": [3, 1]}, {"type": "Flatten"}, )" + embedding, 3);
  CHECK(reshaped.id_layer() == 2);
  CHECK(reshaped.input_token_ids() == 5);
  REQUIRE(find_bad_token_id(reshaped, x, names).has_value());
  const Sequential computed = net_of(R"({"type": "Dense", "units": 3}, )" + embedding, 3);
  CHECK(computed.id_layer() == -1);
  CHECK(computed.input_token_ids() == 0);
  CHECK(!find_bad_token_id(computed, x, names));
}

}  // namespace
}  // namespace tctl
