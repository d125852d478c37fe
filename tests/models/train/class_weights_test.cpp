// Class weights (the train config's class_weight, Keras' fit(class_weight=...)): a training step's loss is
// the mean of each row's loss times its class's weight, for sparse labels, one-hot targets and binary
// targets alike; "balanced" and maps resolve against the data.
#include "models/train/class_weights.h"

#include <doctest/doctest.h>

#include <cmath>

#include "models/train/model.h"
#include "spec_error_check.h"

namespace tctl {
namespace {

using nlohmann::json;

std::unique_ptr<Model> make_model(const std::string& loss, const std::string& output, std::vector<float> weights) {
  const json spec = json::parse(R"({"input_shape": [3], "layers": [{"type": "Dense", "units": 8, "activation": "tanh"},
    {"type": "Dense", "units": )" +
                                output + "}]}");
  ModelOptions o;
  o.loss = loss;
  o.metrics = {};
  o.optimizer.type = "sgd";
  o.inter_op_threads = 1;
  o.intra_op_threads = 1;
  o.class_weights = std::move(weights);
  return std::make_unique<Model>(std::make_shared<Sequential>(Sequential::from_json(spec, "m.json", "", 4)), o);
}

Dataset rows(const std::vector<std::int32_t>& labels, int classes) {
  const auto n = static_cast<std::int64_t>(labels.size());
  std::vector<float> x;
  for (std::int64_t i = 0; i < n; ++i)
    for (int j = 0; j < 3; ++j) x.push_back(std::sin(static_cast<float>(i * 3 + j)));
  Dataset d;
  d.x = Tensor::from_floats(Shape{n, 3}, x);
  d.y = Tensor::from_ints(Shape{n}, labels);
  d.num_classes = classes;
  return d;
}

// The training step's loss against the mean of the unweighted per-row losses (the inference graph's, before
// the step's update) times the rows' weights.
void check_weighted_loss(const std::string& loss, const std::string& output, const std::vector<float>& weights,
                         const Dataset& data, const std::vector<float>& row_weights) {
  auto weighted = make_model(loss, output, weights);
  auto plain = make_model(loss, output, {});
  const std::vector<std::int64_t> all{0, 1, 2, 3, 4, 5};
  Tensor x, y;
  gather_rows(data.x, all, x);
  plain->targets_into(data, all, y);
  const std::vector<float> per_row = plain->eval_batch(x, y)[0].to_floats();
  double want = 0.0;
  for (std::size_t i = 0; i < per_row.size(); ++i) want += static_cast<double>(per_row[i]) * row_weights[i];
  want /= static_cast<double>(per_row.size());
  const float got = weighted->train_batch(x, y, 0)[0].item();
  CHECK(got == doctest::Approx(want).epsilon(1e-5));
  // Unweighted, the step's loss is the plain mean: the weights made the difference.
  double mean = 0.0;
  for (const float l : per_row) mean += l;
  CHECK(std::abs(mean / 6.0 - want) > 1e-3);
}

TEST_CASE("class weights scale each row's training loss by its class's weight") {
  const Dataset data = rows({0, 1, 2, 2, 1, 0}, 3);
  SUBCASE("sparse labels") {
    check_weighted_loss("sparse_categorical_crossentropy", R"(3, "activation": "softmax")", {1.0f, 3.0f, 0.5f}, data,
                        {1.0f, 3.0f, 0.5f, 0.5f, 3.0f, 1.0f});
  }
  SUBCASE("one-hot targets") {
    check_weighted_loss("categorical_crossentropy", R"(3, "activation": "softmax")", {2.0f, 0.25f, 1.0f}, data,
                        {2.0f, 0.25f, 1.0f, 1.0f, 0.25f, 2.0f});
  }
  SUBCASE("binary targets") {
    Dataset binary = rows({0, 1, 1, 1, 0, 1}, 0);
    binary.y = Tensor::from_floats(Shape{6, 1}, std::vector<float>{0, 1, 1, 1, 0, 1});
    check_weighted_loss("binary_crossentropy", R"(1, "activation": "sigmoid")", {4.0f, 1.0f}, binary,
                        {4.0f, 1.0f, 1.0f, 1.0f, 4.0f, 1.0f});
  }
}

TEST_CASE("set_class_weights changes the weights a traced step reads") {
  const Dataset data = rows({0, 1, 2, 2, 1, 0}, 3);
  auto a = make_model("sparse_categorical_crossentropy", R"(3, "activation": "softmax")", {1.0f, 1.0f, 1.0f});
  auto b = make_model("sparse_categorical_crossentropy", R"(3, "activation": "softmax")", {1.0f, 3.0f, 0.5f});
  const std::vector<float> weights{1.0f, 3.0f, 0.5f};
  a->set_class_weights(weights);
  const std::vector<std::int64_t> all{0, 1, 2, 3, 4, 5};
  Tensor x, y;
  gather_rows(data.x, all, x);
  a->targets_into(data, all, y);
  CHECK(a->train_batch(x, y, 0)[0].item() == b->train_batch(x, y, 0)[0].item());
}

TEST_CASE("class_weight_count and resolve_class_weights") {
  CHECK(class_weight_count("sparse_categorical_crossentropy", Shape{-1, 10}) == 10);
  CHECK(class_weight_count("binary_crossentropy", Shape{-1, 1}) == 2);
  CHECK(class_weight_count("binary_crossentropy", Shape{-1, 3}) == 0);
  CHECK(class_weight_count("mse", Shape{-1, 1}) == 0);

  TrainConfig c;
  c.file = "train.json";
  Dataset train = rows({0, 0, 0, 0, 0, 0, 1, 1}, 2);
  train.class_names = {"ham", "spam"};
  // Balanced: 8 rows, 2 classes: 8 / (2 * 6) and 8 / (2 * 2).
  c.class_weight = "balanced";
  std::vector<float> w = resolve_class_weights(c, train, 2);
  CHECK(w[0] == doctest::Approx(8.0 / 12.0));
  CHECK(w[1] == doctest::Approx(2.0));
  // A map by label name or index; unnamed classes weigh 1.
  c.class_weight = json{{"spam", 5.0}};
  w = resolve_class_weights(c, train, 2);
  CHECK(w == std::vector<float>{1.0f, 5.0f});
  c.class_weight = json{{"0", 0.5}};
  CHECK(resolve_class_weights(c, train, 2) == std::vector<float>{0.5f, 1.0f});
  c.class_weight = json{{"eggs", 2.0}};
  testing::check_spec_error([&] { resolve_class_weights(c, train, 2); }, "train.json", "class_weight.eggs",
                            {"no class eggs", "ham, spam"});
  c.class_weight = json{{"2", 2.0}};
  testing::check_spec_error([&] { resolve_class_weights(c, train, 2); }, "train.json", "class_weight.2", {"0 to 1"});
}

}  // namespace
}  // namespace tctl
