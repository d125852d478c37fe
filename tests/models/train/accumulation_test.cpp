// Gradient accumulation (optimizer "gradient_accumulation_steps") and the moving average of the weights
// (optimizer "use_ema"): K batches of B rows make the update one batch of K*B rows makes, and the averages
// are what Keras' use_ema computes, standing in for the weights wherever a run shows or keeps them.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "models/record/train_config.h"
#include "models/train/model.h"
#include "models/train/trainer.h"
#include "spec_error_check.h"

namespace tctl {
namespace {

using nlohmann::json;

const char* const kMlp = R"({"input_shape": [4], "layers": [
  {"type": "Dense", "units": 16, "activation": "relu"},
  {"type": "Dense", "units": 3, "activation": "softmax"}]})";

// n rows of 4 features in [-1, 1]; the class is which third of [-2, 2] x0 + x1 falls in.
Dataset data(std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(n * 4));
  std::vector<std::int32_t> y(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < 4; ++j) x[static_cast<std::size_t>(i * 4 + j)] = u(rng);
    const float s = x[static_cast<std::size_t>(i * 4)] + x[static_cast<std::size_t>(i * 4 + 1)];
    y[static_cast<std::size_t>(i)] = s < -0.67f ? 0 : s < 0.67f ? 1 : 2;
  }
  Dataset d;
  d.x = Tensor::from_floats(Shape{n, 4}, x);
  d.y = Tensor::from_ints(Shape{n}, y);
  d.num_classes = 3;
  return d;
}

ModelOptions options(const std::string& optimizer, std::int64_t accumulation, std::vector<std::string> devices = {}) {
  ModelOptions o;
  o.optimizer.type = optimizer;
  o.optimizer.learning_rate = 0.02;
  o.optimizer.gradient_accumulation_steps = accumulation;
  o.inter_op_threads = 1;
  o.intra_op_threads = 1;
  o.seed = 7;
  o.replica_devices = std::move(devices);
  return o;
}

std::unique_ptr<Model> make_model(const ModelOptions& o) {
  std::vector<std::shared_ptr<Sequential>> nets;
  for (std::size_t r = 0; r < std::max<std::size_t>(1, o.replica_devices.size()); ++r)
    nets.push_back(std::make_shared<Sequential>(Sequential::from_json(json::parse(kMlp), "m.json", "", 3)));
  return std::make_unique<Model>(std::move(nets), o);
}

std::vector<float> weights_of(const Model& m) {
  std::vector<float> out;
  for (const auto& v : m.net().variables()) {
    const std::vector<float> w = v->read().to_floats();
    out.insert(out.end(), w.begin(), w.end());
  }
  return out;
}

float max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  float most = 0.0f;
  for (std::size_t i = 0; i < a.size(); ++i) most = std::max(most, std::abs(a[i] - b[i]));
  return most;
}

float iterations(const Model& m) { return static_cast<float>(m.optimizer().iterations()); }

// Trains `epochs` epochs of `train` in batches of `batch`; returns the weights after.
std::vector<float> train(Model& model, const Dataset& train, std::int64_t batch, std::int64_t epochs = 3) {
  Trainer(model).fit(train, nullptr, epochs, batch);
  return weights_of(model);
}

TEST_CASE("accumulation_step groups an epoch's steps and weights each by its rows") {
  // 200 rows in batches of 10, 3 to an update: 20 steps, 7 updates, the last of 2 steps (20 rows).
  const AccumulationStep first = accumulation_step(1, 0, 200, 10, 3);
  CHECK(first.update == 0);
  CHECK(first.first);
  CHECK_FALSE(first.apply);
  CHECK(first.share == doctest::Approx(1.0 / 3.0));
  const AccumulationStep third = accumulation_step(1, 2, 200, 10, 3);
  CHECK_FALSE(third.first);
  CHECK(third.apply);
  const AccumulationStep last = accumulation_step(2, 19, 200, 10, 3);
  CHECK(last.update == 7 + 6);
  CHECK(last.apply);
  CHECK(last.share == 0.5f);
  // A last batch of fewer rows weighs less: 25 rows in batches of 10, all 3 steps one update of 25 rows.
  CHECK(accumulation_step(1, 2, 25, 10, 3).share == doctest::Approx(5.0 / 25.0));
  CHECK(accumulation_step(1, 0, 25, 10, 3).share == doctest::Approx(10.0 / 25.0));
  // Without accumulation every step is its own update.
  const AccumulationStep plain = accumulation_step(3, 4, 200, 10, 1);
  CHECK(plain.update == 2 * 20 + 4);
  CHECK(plain.share == 1.0f);
  CHECK(plain.first);
  CHECK(plain.apply);
}

TEST_CASE("accumulating gradients over K batches trains what one batch K times larger trains") {
  const Dataset rows = data(200, 1);
  for (const std::string optimizer : {"sgd", "adam"}) {
    // 200 rows: batches of 32 leave 8, batches of 30 leave 20 (two steps of the last update).
    for (const auto& [batch, k] : {std::pair<std::int64_t, std::int64_t>{8, 4}, {10, 3}}) {
      CAPTURE(optimizer);
      CAPTURE(batch);
      auto large = make_model(options(optimizer, 1));
      auto accumulated = make_model(options(optimizer, k));
      auto small = make_model(options(optimizer, 1));
      const std::vector<float> want = train(*large, rows, batch * k);
      const std::vector<float> got = train(*accumulated, rows, batch);
      const std::vector<float> unaccumulated = train(*small, rows, batch);
      INFO("accumulated " << max_difference(got, want) << ", small batches " << max_difference(unaccumulated, want));
      CHECK(max_difference(got, want) < 2e-5f);
      // The check can tell: small batches without accumulation land far away.
      CHECK(max_difference(unaccumulated, want) > 1e-2f);
      // One update per group: the step counter counts updates, as the large batch's does.
      CHECK(iterations(*accumulated) == iterations(*large));
    }
  }
}

TEST_CASE("mirrored replicas accumulate what one replica does") {
  const Dataset rows = data(96, 2);
  auto one = make_model(options("adam", 2));
  auto two = make_model(options("adam", 2, {"cpu", "cpu"}));
  const std::vector<float> want = train(*one, rows, 16, 2);
  const std::vector<float> got = train(*two, rows, 16, 2);
  CHECK(max_difference(got, want) < 1e-5f);
  CHECK(iterations(*two) == 2 * 3);
}

TEST_CASE("use_ema keeps Keras' moving average of every trainable weight") {
  const Dataset rows = data(64, 3);
  ModelOptions o = options("sgd", 1);
  o.optimizer.use_ema = true;
  o.optimizer.ema_momentum = 0.9;
  auto model = make_model(o);
  CHECK_FALSE(model->averages_stand_in());  // no update yet: nothing averaged
  // The average after each step, computed here from the weights: the first update's weight, then
  // 0.9 average + 0.1 weight.
  std::vector<float> expected;
  for (std::int64_t step = 0; step < 6; ++step) {
    const std::vector<std::int64_t> picks{step * 8, step * 8 + 1, step * 8 + 2, step * 8 + 3};
    Tensor x, y;
    model->train_batch(gather_rows(rows.x, picks, x), model->targets_into(rows, picks, y), step);
    const std::vector<float> w = weights_of(*model);
    if (expected.empty()) {
      expected = w;
      continue;
    }
    for (std::size_t i = 0; i < w.size(); ++i) expected[i] = 0.9f * expected[i] + (1.0f - 0.9f) * w[i];
  }
  REQUIRE(model->averages_stand_in());
  REQUIRE(model->optimizer().averages().size() == 4);  // two kernels, two biases
  std::vector<float> averaged;
  for (const NamedTensor& t : model->kept_weights()) {
    const std::vector<float> v = t.value.to_floats();
    averaged.insert(averaged.end(), v.begin(), v.end());
  }
  CHECK(max_difference(averaged, expected) < 1e-6f);
  const std::vector<float> raw = weights_of(*model);
  CHECK(max_difference(averaged, raw) > 1e-4f);

  // Evaluation sees the averages, and leaves the weights as they were.
  Trainer trainer(*model);
  const double with_averages = metric(trainer.evaluate(rows, 16), "loss");
  CHECK(weights_of(*model) == raw);
  model->swap_averages();
  CHECK(weights_of(*model) == averaged);
  const double direct = metric(model->inference().evaluate(rows, 16), "loss");
  model->swap_averages();
  CHECK(with_averages == direct);
  CHECK(with_averages != metric(model->inference().evaluate(rows, 16), "loss"));

  // Finalized: the weights are the averages for good.
  model->finalize_averages();
  CHECK(weights_of(*model) == averaged);
  CHECK_FALSE(model->averages_stand_in());
  CHECK(metric(trainer.evaluate(rows, 16), "loss") == direct);
}

TEST_CASE("the optimizer keys are read, recorded only when set, and hogwild refuses accumulation") {
  json c = json::parse(R"({"model": {"input_shape": [4], "layers": [{"type": "Dense", "units": 3}]},
    "data": {"dataset": "digits"}, "optimizer": {"type": "adam", "gradient_accumulation_steps": 4,
    "use_ema": true, "ema_momentum": 0.999}})");
  const TrainConfig config = TrainConfig::from_json(c, "train.json");
  CHECK(config.optimizer.gradient_accumulation_steps == 4);
  CHECK(config.optimizer.use_ema);
  CHECK(config.optimizer.ema_momentum == 0.999);
  CHECK(config.to_json()["optimizer"]["gradient_accumulation_steps"] == 4);
  CHECK(config.optimizer.slots_per_weight() == 4);
  c["optimizer"] = json{{"type", "sgd"}};
  const json plain = TrainConfig::from_json(c, "train.json").to_json()["optimizer"];
  CHECK_FALSE(plain.contains("gradient_accumulation_steps"));
  CHECK_FALSE(plain.contains("use_ema"));

  c["optimizer"]["gradient_accumulation_steps"] = 0;
  testing::check_spec_error([&] { TrainConfig::from_json(c, "train.json"); }, "train.json",
                            "optimizer.gradient_accumulation_steps", {});
  c["optimizer"]["gradient_accumulation_steps"] = 2;
  c["strategy"] = json{{"type", "hogwild"}, {"workers", 2}};
  testing::check_spec_error([&] { TrainConfig::from_json(c, "train.json"); }, "train.json", "strategy.type",
                            {"gradient_accumulation_steps"});
}

}  // namespace
}  // namespace tctl
