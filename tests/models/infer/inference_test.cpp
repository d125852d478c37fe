#include "models/infer/inference.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/ops/state.h"
#include "spec_error_check.h"

namespace tctl {
namespace {

using nlohmann::json;

std::shared_ptr<Sequential> make_net(std::uint64_t seed) {
  const char* spec = R"({"input_shape": [3], "layers": [
      {"type": "Dense", "units": 8, "activation": "relu"}, {"type": "Dropout", "rate": 0.5},
      {"type": "Dense", "units": 4, "activation": "softmax"}]})";
  return std::make_shared<Sequential>(Sequential::from_json(json::parse(spec), "model.json", "", seed));
}

// Rows i = 0 .. n-1 with features (i/n, -i/n, 1) and class i % 4.
Dataset rows(std::int64_t n) {
  std::vector<float> x;
  std::vector<std::int32_t> y;
  for (std::int64_t i = 0; i < n; ++i) {
    const float f = static_cast<float>(i) / static_cast<float>(n);
    x.insert(x.end(), {f, -f, 1.0f});
    y.push_back(static_cast<std::int32_t>(i % 4));
  }
  Dataset d;
  d.x = Tensor::from_floats(Shape{n, 3}, x);
  d.y = Tensor::from_ints(Shape{n}, y);
  d.num_classes = 4;
  return d;
}

InferenceOptions classification() {
  InferenceOptions o;
  o.loss = "sparse_categorical_crossentropy";
  o.metrics = {"accuracy"};
  return o;
}

TEST_CASE("an inference graph holds the forward pass and the loss, no gradient, update or variable write") {
  Inference model(make_net(1), classification(), 1, 1);
  int forward = 0;
  for (const Node& n : model.graph().nodes()) {
    CAPTURE(n.name);
    CHECK(n.phase == Phase::kForward);
    CHECK(n.op != &ops::assign_variable());
    forward += n.op == &ops::read_variable() ? 1 : 0;
  }
  CHECK(forward == 4);  // two kernels, two biases
}

TEST_CASE("evaluate is the per-example loss and the accuracy over every row, whatever the batch size") {
  Inference model(make_net(2), classification(), 1, 1);
  const Dataset data = rows(10);
  // One batch of every row, by hand: the mean of the per-example losses, argmax against the labels.
  std::vector<std::int64_t> all(10);
  for (std::int64_t i = 0; i < 10; ++i) all[static_cast<std::size_t>(i)] = i;
  Tensor buffer;
  const std::vector<Tensor> out = model.eval_batch(data.x, model.targets_into(data, all, buffer));
  double loss = 0.0;
  int correct = 0;
  for (std::int64_t i = 0; i < 10; ++i) {
    loss += out[0].data<float>()[i];
    const float* row = out[1].data<float>() + i * 4;
    const auto best = std::max_element(row, row + 4) - row;
    correct += best == data.y.data<std::int32_t>()[i] ? 1 : 0;
  }
  for (const std::int64_t batch : {1, 3, 10, 64}) {
    CAPTURE(batch);
    const MetricValues v = model.evaluate(data, batch);
    REQUIRE(v.size() == 2);
    CHECK(v[0].first == "loss");
    CHECK(v[0].second == doctest::Approx(loss / 10.0));
    CHECK(v[1].first == "accuracy");
    CHECK(v[1].second == doctest::Approx(correct / 10.0));
  }
  // Dropout is the training graph's: predictions are the same however often they are made.
  const Tensor a = model.predict(data.x, 4), b = model.predict(data.x, 7);
  CHECK(std::memcmp(a.raw_data(), b.raw_data(), a.bytes()) == 0);
  CHECK(std::memcmp(a.raw_data(), out[1].raw_data(), a.bytes()) != 0);  // probabilities, not the logits scored
}

TEST_CASE("a metric that does not fit the loss, or a loss that does not fit the output, names the config's key") {
  InferenceOptions o = classification();
  o.config_file = "train.json";
  o.metrics = {"mae"};
  testing::check_spec_error([&] { Inference(make_net(3), o, 1, 1); }, "train.json", "metrics[0]", {"does not apply"});
  o.metrics = {};
  o.loss = "binary_crossentropy";
  testing::check_spec_error([&] { Inference(make_net(3), o, 1, 1); }, "train.json", "loss", {});
}

}  // namespace
}  // namespace tctl
