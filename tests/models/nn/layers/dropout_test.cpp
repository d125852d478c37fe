// Dropout: the shared layer checks in both modes, the mask's statistics and scale, and the bad keys.
#include <doctest/doctest.h>

#include <cmath>

#include "core/errors.h"
#include "models/nn/layers/layer_test_util.h"

namespace tctl {
namespace {

using testing::build_one_layer;
using testing::check_layer;
using testing::check_layer_spec_error;

// Runs a Dropout layer of `rate` over `x` of `shape` at `step`; returns the output.
class DropoutRunner {
 public:
  // `nodes_before` unrelated nodes go into the graph ahead of the layer's.
  DropoutRunner(double rate, bool training, std::uint64_t seed = 1, int nodes_before = 0)
      : net_(build_one_layer(R"({"type":"Dropout","rate":)" + nlohmann::json(rate).dump() + "}", {100}, seed)),
        graph_(std::make_shared<Graph>()),
        inter_(1),
        intra_(1) {
    for (int i = 0; i < nodes_before; ++i) graph_->constant(Tensor::filled(Shape{1}, 0.0f));
    x_ = graph_->placeholder("x", DType::kF32, Shape{-1, 100});
    y_ = net_->call(*graph_, x_, training, "cpu");
    SessionOptions so;
    so.seed = seed;
    session_ = std::make_unique<Session>(graph_, inter_, intra_, so);
  }
  const Graph& graph() const { return *graph_; }
  std::vector<float> run(const Tensor& x, std::int64_t step) {
    std::vector<Feed> feeds{{x_, x}};
    std::vector<Output> fetches{y_};
    RunOptions ro;
    ro.step = step;
    return session_->run(feeds, fetches, {}, ro)[0].to_floats();
  }

 private:
  std::shared_ptr<Sequential> net_;
  std::shared_ptr<Graph> graph_;
  ThreadPool inter_, intra_;
  std::unique_ptr<Session> session_;
  Output x_, y_;
};

TEST_CASE("Dropout passes the layer checks in inference and in training") {
  auto checked = check_layer(R"({"type":"Dropout","rate":0.5})", {6});
  CHECK(checked.output_shape == Shape{6});
  CHECK(checked.layer().param_count() == 0);
  CHECK(checked.layer().name() == "dropout");
  testing::LayerCheckOptions training;
  training.training = true;
  training.batch = 4;
  check_layer(R"({"type":"Dropout","rate":0.5})", {6}, training);
  check_layer(R"({"type":"Dropout","rate":0.2})", {3, 2}, training);
}

TEST_CASE("Dropout is the identity in inference") {
  DropoutRunner layer(0.5, false);
  for (const Node& n : layer.graph().nodes()) CHECK(n.op->name != "Dropout");
  Tensor x = testing::random_tensor(Shape{4, 100}, 9);
  CHECK(layer.run(x, 0) == x.to_floats());
}

TEST_CASE("Dropout with rate 0 is the identity in training") {
  DropoutRunner layer(0.0, true);
  Tensor x = testing::random_tensor(Shape{4, 100}, 9);
  CHECK(layer.run(x, 0) == x.to_floats());
}

TEST_CASE("Dropout in training drops about `rate` of the inputs and scales the rest by 1 / (1 - rate)") {
  for (double rate : {0.1, 0.3, 0.5, 0.9}) {
    CAPTURE(rate);
    DropoutRunner layer(rate, true);
    Tensor ones = Tensor::filled(Shape{100, 100}, 1.0f);
    std::vector<float> y = layer.run(ones, 0);
    const float scale = 1.0f / (1.0f - static_cast<float>(rate));
    int dropped = 0;
    for (float v : y) {
      if (v == 0.0f) {
        ++dropped;
        continue;
      }
      CHECK(v == scale);
    }
    // 10,000 draws: the standard deviation of the fraction is at most 0.005.
    CHECK(std::abs(static_cast<double>(dropped) / static_cast<double>(y.size()) - rate) < 0.025);
  }
}

TEST_CASE("Dropout masks repeat for a step and change between steps and seeds") {
  Tensor ones = Tensor::filled(Shape{10, 100}, 1.0f);
  DropoutRunner layer(0.5, true, 1);
  DropoutRunner same_seed(0.5, true, 1);
  DropoutRunner other_seed(0.5, true, 2);
  const std::vector<float> step0 = layer.run(ones, 0);
  CHECK(layer.run(ones, 0) == step0);
  CHECK(same_seed.run(ones, 0) == step0);
  CHECK(layer.run(ones, 1) != step0);
  CHECK(other_seed.run(ones, 0) != step0);
}

TEST_CASE("Dropout masks do not depend on how many nodes the graph holds before the layer") {
  Tensor ones = Tensor::filled(Shape{10, 100}, 1.0f);
  DropoutRunner alone(0.5, true, 1);
  DropoutRunner after_others(0.5, true, 1, 5);
  CHECK(after_others.run(ones, 3) == alone.run(ones, 3));
}

TEST_CASE("Dropout bad keys name their JSON path") {
  check_layer_spec_error(R"({"type":"Dropout","rate":1.0})", {3}, "layers[0].rate",
                         "expected a number in [0.0, 1.0), got 1.0");
  check_layer_spec_error(R"({"type":"Dropout","rate":-0.1})", {3}, "layers[0].rate",
                         "expected a number in [0.0, 1.0), got -0.1");
  check_layer_spec_error(R"({"type":"Dropout","rate":"half"})", {3}, "layers[0].rate",
                         "expected a number, got \"half\"");
  check_layer_spec_error(R"({"type":"Dropout"})", {3}, "layers[0]", "missing required key \"rate\"");
  check_layer_spec_error(R"({"type":"Dropout","rate":0.5,"seed":3})", {3}, "layers[0].seed", "unknown key");
}

}  // namespace
}  // namespace tctl
