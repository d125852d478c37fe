#include "models/train/model.h"
#include "models/train/trainer.h"

#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <random>

#include "core/errors.h"
#include "spec_error_check.h"

namespace tctl {
namespace {

using nlohmann::json;
using testing::check_spec_error;

std::shared_ptr<Sequential> make_net(const std::string& spec, std::uint64_t seed) {
  return std::make_shared<Sequential>(Sequential::from_json(json::parse(spec), "model.json", "", seed));
}

float uniform(std::mt19937_64& rng) {
  return static_cast<float>(static_cast<double>(rng() >> 11) * 0x1.0p-53) * 2.0f - 1.0f;
}

// n points in [-1, 1]^features; the class is which of `classes` sectors the sum of the first two
// coordinates falls in (classes 2: the sign of x0 + x1).
Dataset classification_data(std::int64_t n, std::int64_t features, int classes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> x(static_cast<std::size_t>(n * features));
  std::vector<std::int32_t> y(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t j = 0; j < features; ++j) x[static_cast<std::size_t>(i * features + j)] = uniform(rng);
    const float s =
        (x[static_cast<std::size_t>(i * features)] + x[static_cast<std::size_t>(i * features + 1)] + 2.0f) / 4.0f;
    y[static_cast<std::size_t>(i)] = std::min(classes - 1, static_cast<int>(s * static_cast<float>(classes)));
  }
  Dataset d;
  d.x = Tensor::from_floats(Shape{n, features}, x);
  d.y = Tensor::from_ints(Shape{n}, y);
  d.num_classes = classes;
  d.name = "synthetic";
  return d;
}

// y = 2 x0 - x1 + 0.5, one target column.
Dataset regression_data(std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> x(static_cast<std::size_t>(n * 2)), y(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const float a = uniform(rng), b = uniform(rng);
    x[static_cast<std::size_t>(2 * i)] = a;
    x[static_cast<std::size_t>(2 * i + 1)] = b;
    y[static_cast<std::size_t>(i)] = 2.0f * a - b + 0.5f;
  }
  Dataset d;
  d.x = Tensor::from_floats(Shape{n, 2}, x);
  d.y = Tensor::from_floats(Shape{n, 1}, y);
  return d;
}

const char* kClassifier = R"({"input_shape": [2], "layers": [
    {"type": "Dense", "units": 16, "activation": "relu"}, {"type": "Dropout", "rate": 0.1},
    {"type": "Dense", "units": 2, "activation": "softmax"}]})";

ModelOptions classifier_options(int threads = 1) {
  ModelOptions o;
  o.loss = "sparse_categorical_crossentropy";
  o.optimizer.learning_rate = 0.02;
  o.metrics = {"accuracy"};
  o.inter_op_threads = threads;
  o.intra_op_threads = threads;
  o.seed = 3;
  o.config_file = "train.json";
  return o;
}

std::vector<float> weights_of(const Model& m) {
  std::vector<float> out;
  for (const auto& v : m.net().variables()) {
    std::vector<float> w = v->read().to_floats();
    out.insert(out.end(), w.begin(), w.end());
  }
  return out;
}

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_CASE("fit learns a small classification problem") {
  Dataset train = classification_data(256, 2, 2, 1);
  Dataset validation = classification_data(64, 2, 2, 2);
  Model model(make_net(kClassifier, 3), classifier_options());
  int epochs_seen = 0;
  std::int64_t last_step = 0, steps_seen = 0;
  auto history = Trainer(model).fit(
      train, &validation, 12, 32, [&](const EpochResult& r) { CHECK(r.epoch == ++epochs_seen); },
      [&](std::int64_t step, std::int64_t steps, const MetricValues& running) {
        CHECK(steps == 8);
        CHECK(running.size() == 2);
        last_step = step;
        ++steps_seen;
      });
  REQUIRE(history.size() == 12);
  CHECK(epochs_seen == 12);
  CHECK(last_step == 8);
  CHECK(steps_seen == 12 * 8);
  CHECK(history[0].epoch == 1);
  CHECK(history[0].steps == 8);
  CHECK(history[0].seconds >= 0.0);
  CHECK(history[0].train[0].first == "loss");
  CHECK(history[0].train[1].first == "accuracy");
  CHECK(history[0].validation.size() == 2);
  const double first = metric(history.front().train, "loss"), last = metric(history.back().train, "loss");
  INFO("loss " << first << " -> " << last);
  CHECK(last < 0.5 * first);
  CHECK(metric(history.back().train, "accuracy") > 0.9);
  CHECK(metric(history.back().validation, "accuracy") > 0.9);
  CHECK(std::isnan(metric(history.back().train, "mae")));
}

TEST_CASE("evaluate and predict: metrics, shapes, and agreement") {
  Dataset train = classification_data(200, 2, 2, 1);
  Dataset test = classification_data(100, 2, 2, 5);
  Model model(make_net(kClassifier, 3), classifier_options());
  Trainer(model).fit(train, nullptr, 5, 32);
  MetricValues metrics = Trainer(model).evaluate(test, 32);
  REQUIRE(metrics.size() == 2);
  CHECK(metrics[0].first == "loss");
  CHECK(metrics[1].first == "accuracy");
  CHECK(metrics[0].second > 0.0);

  Tensor p = model.predict(test.x, 32);  // 100 rows: the last batch is partial
  REQUIRE(p.shape() == Shape{100, 2});
  const std::vector<float> probs = p.to_floats();
  int correct = 0;
  double loss = 0.0;
  for (std::int64_t i = 0; i < 100; ++i) {
    const float p0 = probs[static_cast<std::size_t>(2 * i)], p1 = probs[static_cast<std::size_t>(2 * i + 1)];
    CHECK(p0 + p1 == doctest::Approx(1.0).epsilon(1e-5));
    const std::int32_t label = test.y.data<std::int32_t>()[i];
    correct += (p1 > p0 ? 1 : 0) == label;
    loss -= std::log(label == 1 ? p1 : p0);
  }
  CHECK(metric(metrics, "accuracy") == doctest::Approx(correct / 100.0));
  CHECK(metric(metrics, "loss") == doctest::Approx(loss / 100.0).epsilon(1e-4));
  // Inference ignores dropout and the batch size.
  Tensor again = model.predict(test.x, 7);
  const std::vector<float> probs7 = again.to_floats();
  for (std::size_t i = 0; i < probs.size(); ++i) CHECK(probs7[i] == doctest::Approx(probs[i]).epsilon(1e-6));
  CHECK(Trainer(model).evaluate(test, 32) == metrics);
}

TEST_CASE("categorical cross-entropy trains on one-hot targets built from labels") {
  Dataset train = classification_data(256, 2, 3, 1);
  ModelOptions o = classifier_options();
  o.loss = "categorical_crossentropy";
  Model model(make_net(R"({"input_shape": [2], "layers": [
      {"type": "Dense", "units": 16, "activation": "tanh"}, {"type": "Dense", "units": 3, "activation": "softmax"}]})",
                       3),
              o);
  std::vector<std::int64_t> rows{0, 1, 2, 3};
  Tensor t = model.targets_for(train, rows);
  REQUIRE(t.shape() == Shape{4, 3});
  for (std::int64_t i = 0; i < 4; ++i)
    for (std::int64_t j = 0; j < 3; ++j)
      CHECK(t.to_floats()[static_cast<std::size_t>(i * 3 + j)] == (train.y.data<std::int32_t>()[i] == j ? 1.0f : 0.0f));
  auto history = Trainer(model).fit(train, nullptr, 10, 32);
  CHECK(metric(history.back().train, "loss") < 0.6 * metric(history.front().train, "loss"));
  CHECK(metric(history.back().train, "accuracy") > 0.8);
}

TEST_CASE("regression with mse reports mae and mse") {
  Dataset train = regression_data(256, 1);
  ModelOptions o;
  o.loss = "mse";
  o.metrics = {"mae", "mse"};
  o.optimizer.type = "sgd";
  o.optimizer.learning_rate = 0.1;
  o.inter_op_threads = o.intra_op_threads = 1;
  Model model(make_net(R"({"input_shape": [2], "layers": [{"type": "Dense", "units": 1}]})", 1), o);
  auto history = Trainer(model).fit(train, nullptr, 20, 16);
  CHECK(metric(history.back().train, "loss") < 0.01 * metric(history.front().train, "loss"));
  MetricValues m = Trainer(model).evaluate(train, 64);
  REQUIRE(m.size() == 3);
  CHECK(m[1].first == "mae");
  CHECK(m[2].first == "mse");
  // With one output the per-example loss is the squared error, so the two agree.
  CHECK(m[2].second == doctest::Approx(m[0].second).epsilon(1e-4));
  CHECK(m[1].second <= std::sqrt(m[2].second) + 1e-9);
  const std::vector<float> w = model.net().variables()[0]->read().to_floats();
  CHECK(w[0] == doctest::Approx(2.0).epsilon(0.05));
  CHECK(w[1] == doctest::Approx(-1.0).epsilon(0.05));
  CHECK(model.predict(train.x, 50).shape() == Shape{256, 1});
}

TEST_CASE("Model rejects metrics and losses that do not suit the model, naming the config") {
  ModelOptions bad_metric = classifier_options();
  bad_metric.metrics = {"accuracy", "mae"};
  const SpecError metric_error =
      check_spec_error([&] { Model m(make_net(kClassifier, 0), bad_metric); }, "train.json", "metrics[1]", {});
  CHECK(metric_error.message() ==
        "metric \"mae\" does not apply to loss sparse_categorical_crossentropy (known: accuracy, top_k_accuracy)");
  ModelOptions xent = classifier_options();
  check_spec_error(
      [&] {
        Model m(make_net(R"({"input_shape": [2], "layers": [{"type": "Dense", "units": 2, "activation": "relu"}]})", 0),
                xent);
      },
      "train.json", "loss", {"ends in Relu"});
}

// Wide enough that the 2-thread pools really split MatMul rows and elementwise loops.
const char* kWide = R"({"input_shape": [16], "layers": [
    {"type": "Dense", "units": 256, "activation": "relu"}, {"type": "Dropout", "rate": 0.2},
    {"type": "Dense", "units": 64, "activation": "tanh"}, {"type": "Dense", "units": 4, "activation": "softmax"}]})";

TEST_CASE("training is bit-identical with 1 and 2 inter-op and intra-op threads") {
  Dataset train = classification_data(512, 16, 4, 9);
  for (const std::string optimizer : {"adam", "sgd"}) {
    INFO("optimizer " << optimizer);
    std::vector<std::vector<double>> losses;
    std::vector<std::vector<float>> weights;
    for (int threads : {1, 2}) {
      ModelOptions o = classifier_options(threads);
      o.optimizer.type = optimizer;
      o.optimizer.momentum = optimizer == "sgd" ? 0.9 : 0.0;
      Model model(make_net(kWide, 11), o);
      std::vector<double> l;
      for (const auto& r : Trainer(model).fit(train, &train, 3, 128)) {
        l.push_back(metric(r.train, "loss"));
        l.push_back(metric(r.validation, "loss"));
      }
      losses.push_back(l);
      weights.push_back(weights_of(model));
    }
    CHECK(losses[0] == losses[1]);
    CHECK(bit_identical(weights[0], weights[1]));
  }
  // The seed does matter.
  ModelOptions o = classifier_options(1);
  Model a(make_net(kWide, 11), o);
  o.seed = 4;
  Model b(make_net(kWide, 11), o);
  CHECK(metric(Trainer(a).fit(train, nullptr, 1, 128)[0].train, "loss") !=
        metric(Trainer(b).fit(train, nullptr, 1, 128)[0].train, "loss"));
}

TEST_CASE("eager and traced training steps give the same losses, predictions and weights") {
  Dataset train = classification_data(256, 16, 4, 5);
  for (const std::string optimizer : {"adam", "sgd"}) {
    INFO("optimizer " << optimizer);
    ModelOptions o = classifier_options(2);
    o.optimizer.type = optimizer;
    o.optimizer.momentum = optimizer == "sgd" ? 0.9 : 0.0;
    Model traced(make_net(kWide, 11), o);
    Model eager(make_net(kWide, 11), o);
    // kWide has dropout: equal losses also mean equal masks (streams keyed by node id and step).
    for (std::int64_t step = 0; step < 8; ++step) {
      std::vector<std::int64_t> rows;
      for (std::int64_t i = 0; i < 32; ++i) rows.push_back((step * 32 + i) % train.size());
      Dataset batch = take_rows(train, rows);
      const Tensor y = traced.targets_for(train, rows);
      const float a = traced.train_step(batch.x, y, step);
      const float b = eager.eager_train_step(batch.x, y, step);
      CHECK(a == b);
    }
    CHECK(bit_identical(weights_of(traced), weights_of(eager)));
    CHECK(bit_identical(traced.forward_step(train.x).to_floats(), eager.eager_forward_step(train.x).to_floats()));
    // The optimizer state is shared between steps, not traced anew: the same slots as the traced model.
    CHECK(eager.optimizer().state().size() == traced.optimizer().state().size());
  }
}

// Buffers allocated by `steps` train_step calls after `warmup` ones, with the same input tensors.
std::uint64_t steady_state_allocations(Model& model, const Tensor& x, const Tensor& targets, int warmup, int steps) {
  std::int64_t step = 0;
  for (int i = 0; i < warmup; ++i) model.train_step(x, targets, step++);
  const std::uint64_t before = Buffer::allocation_count();
  for (int i = 0; i < steps; ++i) model.train_step(x, targets, step++);
  return Buffer::allocation_count() - before;
}

TEST_CASE("steady-state train_step allocates no buffers") {
  Dataset train = classification_data(128, 16, 4, 9);
  std::vector<std::int64_t> rows(64);
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<std::int64_t>(i);
  const Tensor x = take_rows(train, rows).x;
  for (const std::string loss : {"sparse_categorical_crossentropy", "categorical_crossentropy"}) {
    for (const std::string optimizer : {"adam", "sgd"}) {
      for (int threads : {1, 2}) {
        INFO("loss " << loss << ", optimizer " << optimizer << ", threads " << threads);
        ModelOptions o = classifier_options(threads);
        o.loss = loss;
        o.optimizer.type = optimizer;
        o.optimizer.momentum = 0.5;
        Model model(make_net(kWide, 1), o);
        const Tensor targets = model.targets_for(train, rows);
        CHECK(steady_state_allocations(model, x, targets, 3, 10) == 0);
      }
    }
  }
  ModelOptions o;
  o.loss = "mse";
  o.inter_op_threads = o.intra_op_threads = 1;
  Model regression(make_net(R"({"input_shape": [2], "layers": [{"type": "Dense", "units": 8, "activation": "sigmoid"},
      {"type": "Dense", "units": 1}]})",
                            1),
                   o);
  Dataset data = regression_data(64, 3);
  CHECK(steady_state_allocations(regression, data.x, data.y, 3, 10) == 0);
}

TEST_CASE("steady-state steps inside fit allocate no buffers") {
  // 8 full batches per epoch; between the third step and the last, nothing new should be allocated.
  Dataset train = classification_data(256, 16, 4, 9);
  for (const std::string loss : {"sparse_categorical_crossentropy", "categorical_crossentropy"}) {
    INFO("loss " << loss);
    ModelOptions o = classifier_options(2);
    o.loss = loss;
    Model model(make_net(kWide, 1), o);
    std::uint64_t at_step3 = 0, at_step8 = 0;
    Trainer(model).fit(train, nullptr, 1, 32, {}, [&](std::int64_t step, std::int64_t, const MetricValues&) {
      if (step == 3) at_step3 = Buffer::allocation_count();
      if (step == 8) at_step8 = Buffer::allocation_count();
    });
    CHECK(at_step8 - at_step3 == 0);
  }
}

// classification_data with two classes, as float 0/1 targets [N, 1] for binary cross-entropy.
Dataset binary_data(std::int64_t n, std::uint64_t seed) {
  Dataset d = classification_data(n, 2, 2, seed);
  std::vector<float> y;
  for (std::int32_t label : std::vector<std::int32_t>(d.y.data<std::int32_t>(), d.y.data<std::int32_t>() + n))
    y.push_back(static_cast<float>(label));
  d.y = Tensor::from_floats(Shape{n, 1}, y);
  d.num_classes = 0;
  return d;
}

TEST_CASE("binary cross-entropy trains on float 0/1 targets; accuracy thresholds at 0.5") {
  Dataset data = binary_data(256, 4);
  ModelOptions o = classifier_options(1);
  o.loss = "binary_crossentropy";
  o.metrics = {"accuracy", "mae"};
  o.optimizer.learning_rate = 0.05;
  Model model(make_net(R"({"input_shape": [2], "layers": [{"type": "Dense", "units": 8, "activation": "relu"},
      {"type": "Dense", "units": 1, "activation": "sigmoid"}]})",
                       2),
              o);
  Trainer(model).fit(data, nullptr, 15, 32);
  const MetricValues m = Trainer(model).evaluate(data, 64);
  CHECK(metric(m, "accuracy") > 0.9);
  const std::vector<float> p = model.predict(data.x, 64).to_floats();
  double correct = 0.0;
  for (std::size_t i = 0; i < p.size(); ++i) correct += (p[i] > 0.5f) == (data.y.data<float>()[i] > 0.5f);
  CHECK(metric(m, "accuracy") == doctest::Approx(correct / static_cast<double>(p.size())));
}

TEST_CASE("the new optimizers, schedules and clipping train bit-identically with 1 and 2 threads") {
  Dataset train = classification_data(256, 16, 4, 9);
  for (
      const std::string text :
      {R"({"type": "adamw", "global_clipnorm": 0.5, "schedule": {"type": "cosine", "decay_steps": 10, "warmup_steps": 3}})",
       R"({"type": "rmsprop", "momentum": 0.5, "centered": true, "schedule": {"type": "step", "step_size": 4}})",
       R"({"type": "adagrad", "learning_rate": 0.05, "schedule": {"type": "exponential", "decay_steps": 5, "decay_rate": 0.5}})"}) {
    CAPTURE(text);
    const json j = json::parse(text);
    SpecReader reader(j, "train.json", "optimizer");
    std::vector<std::vector<float>> weights;
    std::vector<double> losses;
    for (int threads : {1, 2}) {
      ModelOptions o = classifier_options(threads);
      o.optimizer = OptimizerConfig::parse(reader);
      Model model(make_net(kWide, 11), o);
      losses.push_back(metric(Trainer(model).fit(train, nullptr, 2, 64).back().train, "loss"));
      weights.push_back(weights_of(model));
      CHECK(std::isfinite(losses.back()));
    }
    CHECK(losses[0] == losses[1]);
    CHECK(bit_identical(weights[0], weights[1]));
  }
}

TEST_CASE("an epoch interrupted and continued reports what the uninterrupted epoch reports, bit for bit") {
  Dataset train = classification_data(256, 2, 2, 1);
  Dataset validation = classification_data(64, 2, 2, 2);
  Model straight(make_net(kClassifier, 3), classifier_options());
  const auto expected = Trainer(straight).fit(train, &validation, 3, 32);

  // Stopped after step 3 of epoch 2 (the flag is read after every step), then continued from there.
  Model model(make_net(kClassifier, 3), classifier_options());
  Trainer trainer(model);
  std::atomic<bool> stop{false};
  trainer.set_interrupt_flag(&stop);
  std::int64_t epoch = 1;
  auto history = trainer.fit(
      train, &validation, 3, 32, [&](const EpochResult& r) { epoch = r.epoch + 1; },
      [&](std::int64_t step, std::int64_t, const MetricValues&) { stop = epoch == 2 && step == 3; });
  REQUIRE(trainer.interrupted_at());
  const FitPosition at = *trainer.interrupted_at();
  CHECK(at.epoch == 2);
  CHECK(at.steps_done == 3);
  CHECK(at.sums.examples == 3 * 32);
  REQUIRE(history.size() == 1);
  stop = false;
  for (auto& r : trainer.fit(train, &validation, 3, 32, {}, {}, at)) history.push_back(std::move(r));
  REQUIRE(history.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(history[i].epoch == expected[i].epoch);
    CHECK(history[i].train == expected[i].train);
    CHECK(history[i].validation == expected[i].validation);
  }
  CHECK(bit_identical(weights_of(model), weights_of(straight)));
}

// A small MLP trained on iris for 3 epochs at batch 16, with `prefetch` batches prepared ahead (0: inline)
// and its layers on `device`: the loss of each epoch, the weights, and the device its batches are fed on.
struct IrisRun {
  std::vector<double> losses;  // each epoch's training and validation loss
  std::uint64_t replays = 0;   // Model::training_graph_replays
  std::vector<float> weights;
  Device* input_device = nullptr;
};
IrisRun fit_iris(std::int64_t prefetch, const std::string& device, bool device_graphs = false) {
  nlohmann::json spec = {
      {"input_shape", {4}},
      {"layers", {{{"type", "Dense"}, {"units", 8}, {"activation", "relu"}}, {{"type", "Dense"}, {"units", 3}}}}};
  ModelOptions o;
  o.device = device;
  o.prefetch = prefetch;
  o.prefetch_min_bytes = 0;  // iris' batches are small: without this the producer thread would not start
  o.inter_op_threads = 1;
  o.intra_op_threads = 1;
  o.device_graphs = device_graphs;
  o.placement.log = [](const std::string& l) {
    if (l.rfind("device", 0) == 0) std::fprintf(stderr, "%s\n", l.c_str());
  };
  Model m(std::make_shared<Sequential>(Sequential::from_json(spec, "m.json", "", 5)), o);
  IrisRun run;
  run.input_device = m.input_device();
  Dataset iris = load_builtin("iris", 0, "", "");
  // Validated after each epoch: the inference frame then holds reads of the weights the next step updates.
  for (const auto& r : Trainer(m).fit(iris, &iris, 3, 16)) {
    run.losses.push_back(metric(r.train, "loss"));
    run.losses.push_back(metric(r.validation, "loss"));
  }
  run.weights = weights_of(m);
  run.replays = m.training_graph_replays();
  return run;
}

}  // namespace
}  // namespace tctl

TEST_CASE("the prefetching input pipeline changes no result") {
  using namespace tctl;
  CHECK(fit_iris(0, "cpu").losses == fit_iris(3, "cpu").losses);
}

TEST_CASE("device graphs on sim, prefetched or not, train and validate to the eager run's results") {
  using namespace tctl;
  const IrisRun eager = fit_iris(0, "sim:0");
  for (const std::int64_t prefetch : {0, 2}) {
    CAPTURE(prefetch);
    const IrisRun graphs = fit_iris(prefetch, "sim:0", true);
    CHECK(graphs.losses == eager.losses);
    CHECK(bit_identical(graphs.weights, eager.weights));
    CHECK(graphs.replays > 20);
  }
  CHECK(eager.replays == 0);
}

TEST_CASE("a model on a device gets its prefetched batches there, with the same results") {
  using namespace tctl;
  // The loss falls back to the CPU (sim has no Mean); the first layer reads x on sim:0.
  const IrisRun inline_batches = fit_iris(0, "sim:0"), prefetched = fit_iris(2, "sim:0");
  CHECK(prefetched.input_device == DeviceRegistry::instance().find("sim:0"));
  CHECK(inline_batches.losses == prefetched.losses);
  CHECK(bit_identical(inline_batches.weights, prefetched.weights));
  // On the CPU there is nowhere to move a batch to.
  CHECK(fit_iris(2, "cpu").input_device == nullptr);
}
