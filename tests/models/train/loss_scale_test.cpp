// Dynamic loss scaling (the mixed_float16 precision, models/train/optimizer.h): on the CPU, which computes
// it in float32, scaling by a power of two and back is exact, so a run trains to float32's very weights;
// a step whose scaled gradients overflow is skipped whole and the scale halved.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <random>

#include "models/train/model.h"
#include "models/train/trainer.h"

namespace tctl {
namespace {

using nlohmann::json;

// n rows of 3 features in [-1, 1]; `classes` > 0: the class is which of `classes` bands x0 - x2 falls in,
// else a regression target of `target_size` times x0 + x1.
Dataset rows(std::int64_t n, int classes, float target_size = 1.0f) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(n * 3)), t(static_cast<std::size_t>(n));
  std::vector<std::int32_t> y(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
    for (std::size_t j = 0; j < 3; ++j) x[i * 3 + j] = u(rng);
    const float band = (x[i * 3] - x[i * 3 + 2] + 2.0f) / 4.0f * static_cast<float>(classes);
    y[i] = std::min(classes - 1, static_cast<std::int32_t>(band));
    t[i] = target_size * (x[i * 3] + x[i * 3 + 1]);
  }
  Dataset d;
  d.x = Tensor::from_floats(Shape{n, 3}, x);
  if (classes > 0) {
    d.y = Tensor::from_ints(Shape{n}, y);
    d.num_classes = classes;
  } else {
    d.y = Tensor::from_floats(Shape{n, 1}, t);
  }
  return d;
}

struct Run {
  std::unique_ptr<Model> model;
  std::vector<float> weights;
};

// Trains 3 epochs of `data` in batches of 16 with `o`, on as many networks as o has replica devices.
Run train(ModelOptions o, const Dataset& data, int outputs) {
  o.inter_op_threads = 1;
  o.intra_op_threads = 1;
  o.seed = 5;
  const json spec = json::parse(R"({"input_shape": [3], "layers": [{"type": "Dense", "units": 8, "activation": "relu"},
    {"type": "Dense", "units": )" +
                                std::to_string(outputs) + "}]}");
  std::vector<std::shared_ptr<Sequential>> nets;
  for (std::size_t r = 0; r < std::max<std::size_t>(1, o.replica_devices.size()); ++r)
    nets.push_back(std::make_shared<Sequential>(Sequential::from_json(spec, "m.json", "", 3)));
  Run run{std::make_unique<Model>(std::move(nets), o), {}};
  Trainer(*run.model).fit(data, nullptr, 3, 16);
  for (const auto& v : run.model->net().variables()) {
    const std::vector<float> w = v->read().to_floats();
    run.weights.insert(run.weights.end(), w.begin(), w.end());
  }
  return run;
}

ModelOptions classifier(const std::string& optimizer) {
  ModelOptions o;
  o.loss = "sparse_categorical_crossentropy";
  o.optimizer.type = optimizer;
  o.optimizer.learning_rate = 0.05;
  return o;
}

}  // namespace

TEST_CASE("mixed_float16's loss scaling trains to float32's weights, bit for bit, on the CPU") {
  const Dataset data = rows(160, 3);
  for (const std::string optimizer : {"sgd", "adam", "rmsprop"}) {
    for (const bool mirrored : {false, true}) {
      CAPTURE(optimizer);
      CAPTURE(mirrored);
      ModelOptions plain = classifier(optimizer);
      plain.optimizer.use_ema = optimizer == "adam";
      plain.optimizer.global_clipnorm = optimizer == "rmsprop" ? 0.5 : 0.0;
      if (mirrored) plain.replica_devices = {"cpu", "cpu"};
      ModelOptions scaled = plain;
      scaled.optimizer.loss_scale.dynamic = true;
      scaled.optimizer.loss_scale.growth_steps = 4;  // the scale grows from 2^15 to 2^22 in the run
      const Run a = train(plain, data, 3), b = train(scaled, data, 3);
      CHECK(a.weights == b.weights);
      CHECK(b.model->optimizer().skipped_steps() == 0.0);
      CHECK(b.model->optimizer().loss_scale() == std::ldexp(32768.0, 30 / 4));
      CHECK(b.model->optimizer().iterations() == a.model->optimizer().iterations());
      CHECK(a.model->optimizer().loss_scale() == 0.0);
    }
  }
}

// An epoch interrupted and continued (a resumed checkpoint) counts the steps skipped before the interrupt
// too: its history row is the unbroken run's.
TEST_CASE("an epoch continued from where it was interrupted counts every step it skipped") {
  const Dataset data = rows(160, 0, 1e4f);  // overflows at 2^126, as below: the first steps are skipped
  ModelOptions o;
  o.loss = "mse";
  o.optimizer.type = "adam";
  o.optimizer.loss_scale.dynamic = true;
  o.optimizer.loss_scale.initial_scale = 0x1p126;
  o.inter_op_threads = 1;
  o.intra_op_threads = 1;
  const json spec = json::parse(R"({"input_shape": [3], "layers": [{"type": "Dense", "units": 1}]})");
  auto skipped_per_epoch = [](const std::vector<EpochResult>& history) {
    std::vector<double> out;
    for (const EpochResult& r : history)
      for (const auto& [name, value] : r.train)
        if (name == "skipped_steps") out.push_back(value);
    return out;
  };
  Model straight(std::make_shared<Sequential>(Sequential::from_json(spec, "m.json", "", 3)), o);
  const std::vector<double> expected = skipped_per_epoch(Trainer(straight).fit(data, nullptr, 2, 16));
  REQUIRE(expected.size() == 2);
  REQUIRE(expected[0] >= 4.0);  // the interrupt below falls among the skipped steps

  Model broken(std::make_shared<Sequential>(Sequential::from_json(spec, "m.json", "", 3)), o);
  Trainer trainer(broken);
  std::atomic<bool> stop{false};
  trainer.set_interrupt_flag(&stop);
  std::vector<EpochResult> history = trainer.fit(
      data, nullptr, 2, 16, {}, [&](std::int64_t step, std::int64_t, const MetricValues&) { stop = step == 3; });
  REQUIRE(trainer.interrupted_at());
  const FitPosition at = *trainer.interrupted_at();
  CHECK(at.steps_done == 3);
  CHECK(at.skipped_steps == 3);
  CHECK(history.empty());
  stop = false;
  history = trainer.fit(data, nullptr, 2, 16, {}, {}, at);
  CHECK(skipped_per_epoch(history) == expected);
}

TEST_CASE("a step whose scaled gradients overflow is skipped whole and halves the scale") {
  // Targets of size 1e4 make the mean squared error's gradients about 1e3: at 2^126 they overflow.
  const Dataset data = rows(160, 0, 1e4f);
  ModelOptions o;
  o.loss = "mse";
  o.metrics = {"mae"};
  o.optimizer.type = "adam";
  o.optimizer.loss_scale.dynamic = true;
  o.optimizer.loss_scale.initial_scale = 0x1p126;
  const Run run = train(o, data, 1);
  const Optimizer& opt = run.model->optimizer();
  const double skipped = opt.skipped_steps();
  CHECK(skipped >= 1.0);
  CHECK(opt.iterations() + skipped == 30.0);  // 3 epochs of 10 steps: each either counted or skipped
  CHECK(opt.loss_scale() == std::ldexp(1.0, 126 - static_cast<int>(skipped)));

  // One overflowed step leaves the weights, Adam's moments and the step count as they were.
  auto model = std::make_unique<Model>(
      std::make_shared<Sequential>(Sequential::from_json(
          json::parse(R"({"input_shape": [3], "layers": [{"type": "Dense", "units": 1}]})"), "m.json", "", 3)),
      o);
  const std::vector<float> before = model->net().variables()[0]->read().to_floats();
  const Dataset batch = rows(16, 0, 1e4f);
  model->train_batch(batch.x, batch.y, 0);
  CHECK(model->net().variables()[0]->read().to_floats() == before);
  CHECK(model->optimizer().iterations() == 0.0);
  CHECK(model->optimizer().skipped_steps() == 1.0);
  CHECK(model->optimizer().loss_scale() == 0x1p125);
  int moments = 0;
  for (const auto& slot : model->optimizer().state()) {
    const std::string& name = slot->name();
    if (!name.ends_with("/m") && !name.ends_with("/v")) continue;
    ++moments;
    for (const float x : slot->read().to_floats()) CHECK(x == 0.0f);
  }
  CHECK(moments == 4);
}

TEST_CASE("device graphs on sim train to the eager run's weights, overflowed steps included") {
  // On sim:0 the network, its gradients, AllFinite, MulScalar and Adam run on the device and the loss on the
  // CPU: three segments a step, the last one skipped (run eagerly, dead) while the scale overflows.
  const Dataset data = rows(160, 0, 1e4f);
  for (const double scale : {0x1p10, 0x1p126}) {
    CAPTURE(scale);
    ModelOptions o;
    o.loss = "mse";
    o.optimizer.type = "adam";
    o.optimizer.loss_scale.dynamic = true;
    o.optimizer.loss_scale.initial_scale = scale;
    // Doubling after every good step: at 2^126 the scale then overflows again and again after recorded steps.
    o.optimizer.loss_scale.growth_steps = 1;
    o.device = "sim:0";
    o.placement.strict = false;
    const Run eager = train(o, data, 1);
    o.device_graphs = true;
    // A skipped step's segment runs eagerly and is recorded afresh after: never left eager for good.
    std::vector<std::string> eager_for_good;
    o.placement.log = [&](const std::string& line) {
      if (line.find("runs eagerly") != std::string::npos) eager_for_good.push_back(line);
    };
    const Run graphs = train(o, data, 1);
    CHECK(eager_for_good.empty());
    CHECK(graphs.weights == eager.weights);
    CHECK(graphs.model->optimizer().skipped_steps() == eager.model->optimizer().skipped_steps());
    CHECK(graphs.model->optimizer().loss_scale() == eager.model->optimizer().loss_scale());
    // 30 steps: the first warms up, the second records; without overflow the other 28 replay all three.
    if (scale == 0x1p10) CHECK(graphs.model->training_graph_replays() == 28 * 3);
    CHECK(graphs.model->training_graph_replays() > 20);
    CHECK(eager.model->training_graph_replays() == 0);
  }
}

}  // namespace tctl
