#include "models/nn/losses.h"

#include <doctest/doctest.h>

#include <cmath>
#include <memory>

#include "core/autodiff.h"
#include "core/session.h"

namespace tctl {
namespace {

// log(sum(exp(row))) in double, the hand computation the kernels are checked against.
double logsumexp(const std::vector<double>& row) {
  double mx = row[0];
  for (double v : row) mx = std::max(mx, v);
  double s = 0.0;
  for (double v : row) s += std::exp(v - mx);
  return std::log(s) + mx;
}

// A graph x -> [softmax] -> loss, with feeds for x and the targets.
struct LossGraph {
  std::shared_ptr<Graph> g = std::make_shared<Graph>();
  Output x, predictions, targets;
  LossOutputs loss;
  Output dx;

  LossGraph(const std::string& loss_name, std::int64_t classes, bool softmax_output) {
    x = g->placeholder("x", DType::kF32, Shape{-1, classes});
    predictions = softmax_output ? g->add("Softmax", {x}) : x;
    const TensorSpec t = loss_target_spec(loss_name, g->spec(predictions).shape);
    targets = g->placeholder("targets", t.dtype, t.shape);
    loss = build_loss(*g, loss_name, predictions, targets);
    std::vector<Output> xs{x};
    dx = gradients(*g, loss.mean, xs)[0];
  }

  // Per-example losses, mean and d mean / d x.
  std::vector<Tensor> run(const Tensor& xv, const Tensor& tv) {
    ThreadPool inter(1), intra(1);
    Session s(g, inter, intra);
    std::vector<Feed> feeds{{x, xv}, {targets, tv}};
    std::vector<Output> fetches{loss.per_example, loss.mean, dx};
    return s.run(feeds, fetches);
  }
};

const std::vector<float> kLogits{1.0f, 2.0f, 3.0f, 0.0f, 0.0f, 0.0f, -1.0f, 0.5f, 4.0f};
const std::vector<std::int32_t> kLabels{2, 0, 1};

TEST_CASE("loss names and kinds") {
  CHECK(loss_names() == std::vector<std::string>{"sparse_categorical_crossentropy", "categorical_crossentropy",
                                                 "binary_crossentropy", "mse", "mean_squared_error", "mae",
                                                 "mean_absolute_error", "huber"});
  CHECK(loss_is_classification("sparse_categorical_crossentropy"));
  CHECK(loss_is_classification("categorical_crossentropy"));
  for (const std::string name :
       {"binary_crossentropy", "mse", "mean_squared_error", "mae", "mean_absolute_error", "huber"}) {
    CAPTURE(name);
    CHECK_FALSE(loss_is_classification(name));
    CHECK(loss_is_binary(name) == (name == "binary_crossentropy"));
  }
  CHECK(loss_metrics("sparse_categorical_crossentropy") == std::vector<std::string>{"accuracy", "top_k_accuracy"});
  CHECK(loss_metrics("binary_crossentropy") == std::vector<std::string>{"accuracy", "mae", "mse"});
  CHECK(loss_metrics("huber") == std::vector<std::string>{"mae", "mse"});
}

TEST_CASE("loss_target_spec: int32 labels for the sparse loss, predictions' shape otherwise") {
  TensorSpec sparse = loss_target_spec("sparse_categorical_crossentropy", Shape{-1, 10});
  CHECK(sparse.dtype == DType::kI32);
  CHECK(sparse.shape == Shape{-1});
  TensorSpec dense = loss_target_spec("categorical_crossentropy", Shape{-1, 10});
  CHECK(dense.dtype == DType::kF32);
  CHECK(dense.shape == Shape{-1, 10});
  TensorSpec mse = loss_target_spec("mse", Shape{32, 3});
  CHECK(mse.dtype == DType::kF32);
  CHECK(mse.shape == Shape{32, 3});
  // Outputs per step: each row's targets flat, as the data holds them.
  CHECK(loss_target_spec("mae", Shape{-1, 5, 2}).shape == Shape{-1, 10});
}

TEST_CASE("cross-entropy after a softmax output is fused: computed from the softmax's input") {
  for (const std::string name : {"sparse_categorical_crossentropy", "categorical_crossentropy"}) {
    CAPTURE(name);
    LossGraph softmax(name, 3, true);
    const Node& xent = softmax.g->node(softmax.loss.per_example);
    CHECK(xent.op->name == (name == "categorical_crossentropy" ? "SoftmaxXent" : "SparseSoftmaxXent"));
    CHECK(xent.inputs[0] == softmax.x.node);  // the logits, not the probabilities
    CHECK(softmax.g->node(softmax.loss.mean).op->name == "Mean");
    // The softmax itself stays in the graph for predictions but the loss does not go through it.
    LossGraph linear(name, 3, false);
    CHECK(linear.g->node(linear.loss.per_example).inputs[0] == linear.x.node);
  }
}

TEST_CASE("sparse cross-entropy values and gradient match the hand computation") {
  for (bool softmax_output : {true, false}) {
    CAPTURE(softmax_output);
    LossGraph lg("sparse_categorical_crossentropy", 3, softmax_output);
    auto out = lg.run(Tensor::from_floats(Shape{3, 3}, kLogits), Tensor::from_ints(Shape{3}, kLabels));
    const std::vector<float> per = out[0].to_floats();
    const std::vector<float> dx = out[2].to_floats();
    double mean = 0.0;
    for (int r = 0; r < 3; ++r) {
      std::vector<double> row(kLogits.begin() + r * 3, kLogits.begin() + r * 3 + 3);
      const double lse = logsumexp(row);
      const double expected = lse - row[static_cast<std::size_t>(kLabels[static_cast<std::size_t>(r)])];
      CHECK(per[static_cast<std::size_t>(r)] == doctest::Approx(expected).epsilon(1e-6));
      mean += expected / 3.0;
      // d mean / d logits = (softmax - onehot) / batch.
      for (int j = 0; j < 3; ++j) {
        const double p = std::exp(row[static_cast<std::size_t>(j)] - lse);
        const double want = (p - (j == kLabels[static_cast<std::size_t>(r)] ? 1.0 : 0.0)) / 3.0;
        CHECK(dx[static_cast<std::size_t>(r * 3 + j)] == doctest::Approx(want).epsilon(1e-5));
      }
    }
    CHECK(out[1].item() == doctest::Approx(mean).epsilon(1e-6));
    CHECK(out[1].shape() == Shape{});
    CHECK(out[0].shape() == Shape{3});
  }
}

TEST_CASE("categorical cross-entropy with one-hot targets equals the sparse loss") {
  std::vector<float> onehot(9, 0.0f);
  for (int r = 0; r < 3; ++r) onehot[static_cast<std::size_t>(r * 3 + kLabels[static_cast<std::size_t>(r)])] = 1.0f;
  LossGraph dense("categorical_crossentropy", 3, true);
  LossGraph sparse("sparse_categorical_crossentropy", 3, true);
  auto d = dense.run(Tensor::from_floats(Shape{3, 3}, kLogits), Tensor::from_floats(Shape{3, 3}, onehot));
  auto s = sparse.run(Tensor::from_floats(Shape{3, 3}, kLogits), Tensor::from_ints(Shape{3}, kLabels));
  for (std::size_t i = 0; i < 3; ++i) CHECK(d[0].to_floats()[i] == doctest::Approx(s[0].to_floats()[i]).epsilon(1e-6));
  for (std::size_t i = 0; i < 9; ++i) CHECK(d[2].to_floats()[i] == doctest::Approx(s[2].to_floats()[i]).epsilon(1e-6));

  // Soft targets: sum_j t_j (lse - x_j).
  const std::vector<float> soft{0.2f, 0.3f, 0.5f, 1, 0, 0, 0, 0.5f, 0.5f};
  auto out = dense.run(Tensor::from_floats(Shape{3, 3}, kLogits), Tensor::from_floats(Shape{3, 3}, soft));
  for (int r = 0; r < 3; ++r) {
    std::vector<double> row(kLogits.begin() + r * 3, kLogits.begin() + r * 3 + 3);
    double expected = 0.0;
    for (int j = 0; j < 3; ++j)
      expected += soft[static_cast<std::size_t>(r * 3 + j)] * (logsumexp(row) - row[static_cast<std::size_t>(j)]);
    CHECK(out[0].to_floats()[static_cast<std::size_t>(r)] == doctest::Approx(expected).epsilon(1e-6));
  }
}

TEST_CASE("fused cross-entropy stays finite for extreme logits") {
  LossGraph lg("sparse_categorical_crossentropy", 3, true);
  auto out = lg.run(Tensor::from_floats(Shape{2, 3}, std::vector<float>{1000, 0, -1000, 1000, 0, -1000}),
                    Tensor::from_ints(Shape{2}, std::vector<std::int32_t>{0, 2}));
  CHECK(out[0].to_floats()[0] == doctest::Approx(0.0));
  CHECK(out[0].to_floats()[1] == doctest::Approx(2000.0));
  for (float v : out[2].to_floats()) CHECK(std::isfinite(v));
}

TEST_CASE("mse is the mean over features of the squared error, then the mean over the batch") {
  auto g = std::make_shared<Graph>();
  Output p = g->placeholder("p", DType::kF32, Shape{-1, 2});
  Output t = g->placeholder("t", DType::kF32, Shape{-1, 2});
  CHECK(check_loss_fits(*g, "mse", p).empty());
  LossOutputs loss = build_loss(*g, "mse", p, t);
  CHECK(g->node(loss.per_example).op->name == "Mse");
  std::vector<Output> xs{p};
  Output dp = gradients(*g, loss.mean, xs)[0];
  ThreadPool inter(1), intra(1);
  Session s(g, inter, intra);
  std::vector<Feed> feeds{{p, Tensor::from_floats(Shape{2, 2}, std::vector<float>{1, 2, 3, 4})},
                          {t, Tensor::from_floats(Shape{2, 2}, std::vector<float>{0, 0, 3, 6})}};
  std::vector<Output> fetches{loss.per_example, loss.mean, dp};
  auto out = s.run(feeds, fetches);
  CHECK(out[0].to_floats() == std::vector<float>{2.5f, 2.0f});  // (1 + 4) / 2, (0 + 4) / 2
  CHECK(out[1].item() == doctest::Approx(2.25));
  // d mean / d p = 2 (p - t) / (features * batch).
  CHECK(out[2].to_floats() == std::vector<float>{0.5f, 1.0f, 0.0f, -1.0f});
}

TEST_CASE("check_loss_fits: cross-entropy needs a (None, classes) softmax or linear output") {
  Graph g;
  Output x = g.placeholder("x", DType::kF32, Shape{-1, 4});
  CHECK(check_loss_fits(g, "sparse_categorical_crossentropy", x).empty());
  CHECK(check_loss_fits(g, "categorical_crossentropy", g.add("Softmax", {x})).empty());
  for (const std::string op : {"Relu", "Sigmoid", "Tanh"}) {
    CAPTURE(op);
    const std::string why = check_loss_fits(g, "sparse_categorical_crossentropy", g.add(op, {x}));
    CHECK(why == std::string("cross-entropy needs a softmax or linear output layer, the model ends in ") + op);
    CHECK(check_loss_fits(g, "mse", g.add(op, {x})).empty());
  }
  Output flat = g.placeholder("flat", DType::kF32, Shape{-1});
  CHECK(check_loss_fits(g, "categorical_crossentropy", flat)
            .find("cross-entropy needs a (None, classes) output, got (None") == 0);
}

// Per-example losses, mean and d mean / d p for a regression-style loss on [2, 2] predictions.
std::vector<Tensor> run_pointwise(const std::string& name, const std::vector<float>& p, const std::vector<float>& t,
                                  const std::string& output_op = "") {
  auto g = std::make_shared<Graph>();
  Output x = g->placeholder("p", DType::kF32, Shape{-1, 2});
  Output pred = output_op.empty() ? x : g->add(output_op, {x});
  Output tp = g->placeholder("t", DType::kF32, Shape{-1, 2});
  CHECK(check_loss_fits(*g, name, pred).empty());
  LossOutputs loss = build_loss(*g, name, pred, tp);
  std::vector<Output> xs{pred};
  Output dp = gradients(*g, loss.mean, xs)[0];
  ThreadPool inter(1), intra(1);
  Session s(g, inter, intra);
  std::vector<Feed> feeds{{x, Tensor::from_floats(Shape{2, 2}, p)}, {tp, Tensor::from_floats(Shape{2, 2}, t)}};
  std::vector<Output> fetches{loss.per_example, loss.mean, dp};
  return s.run(feeds, fetches);
}

TEST_CASE("mae and mean_absolute_error: mean |p - t| over features, gradient sign(p - t) / (F N)") {
  for (const std::string name : {"mae", "mean_absolute_error"}) {
    CAPTURE(name);
    auto out = run_pointwise(name, {1, 2, 3, 4}, {0, 0, 3, 6});
    CHECK(out[0].to_floats() == std::vector<float>{1.5f, 1.0f});
    CHECK(out[1].item() == doctest::Approx(1.25));
    CHECK(out[2].to_floats() == std::vector<float>{0.25f, 0.25f, 0.0f, -0.25f});
  }
  CHECK(run_pointwise("mean_squared_error", {1, 2, 3, 4}, {0, 0, 3, 6})[0].to_floats() ==
        std::vector<float>{2.5f, 2.0f});
}

TEST_CASE("huber (delta 1): quadratic inside, linear outside") {
  // d = 0.5, 3, 0, -2: 0.125, 1 * (3 - 0.5) = 2.5, 0, 1.5.
  auto out = run_pointwise("huber", {0.5f, 3, 1, -2}, {0, 0, 1, 0});
  CHECK(out[0].to_floats()[0] == doctest::Approx((0.125 + 2.5) / 2));
  CHECK(out[0].to_floats()[1] == doctest::Approx(1.5 / 2));
  // Gradient: d inside, delta * sign(d) outside, over features * batch.
  CHECK(out[2].to_floats() == std::vector<float>{0.125f, 0.25f, 0.0f, -0.25f});
}

TEST_CASE("binary cross-entropy on sigmoid probabilities, clipped like Keras") {
  const std::vector<float> logits{0.3f, -1.2f, 2.0f, 0.0f};
  const std::vector<float> targets{1, 0, 0, 1};
  auto out = run_pointwise("binary_crossentropy", logits, targets, "Sigmoid");
  std::vector<double> want_dp;
  for (int r = 0; r < 2; ++r) {
    double expected = 0.0;
    for (int j = 0; j < 2; ++j) {
      const double p = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[static_cast<std::size_t>(r * 2 + j)])));
      const double t = targets[static_cast<std::size_t>(r * 2 + j)];
      expected += -(t * std::log(p) + (1 - t) * std::log(1 - p)) / 2.0;
      want_dp.push_back((p - t) / (p * (1 - p)) / 4.0);
    }
    CHECK(out[0].to_floats()[static_cast<std::size_t>(r)] == doctest::Approx(expected).epsilon(1e-5));
  }
  for (std::size_t i = 0; i < 4; ++i) CHECK(out[2].to_floats()[i] == doctest::Approx(want_dp[i]).epsilon(1e-4));
  // Saturated probabilities are clipped to [1e-7, 1 - 1e-7]: a finite loss of -log(1e-7), and no gradient.
  auto sat = run_pointwise("binary_crossentropy", {100, -100, 100, -100}, {0, 1, 1, 0}, "Sigmoid");
  // (float32 spacing near 1 makes 1 - (1 - 1e-7) about 1.19e-7, as in Keras' float32 computation.)
  CHECK(sat[0].to_floats()[0] == doctest::Approx(-std::log(1e-7)).epsilon(0.01));
  CHECK(sat[0].to_floats()[1] == doctest::Approx(0.0).epsilon(1e-6));
  for (float v : sat[2].to_floats()) CHECK(v == 0.0f);
}

TEST_CASE("check_loss_fits: binary cross-entropy needs a (None, units) sigmoid output") {
  Graph g;
  Output x = g.placeholder("x", DType::kF32, Shape{-1, 1});
  CHECK(check_loss_fits(g, "binary_crossentropy", g.add("Sigmoid", {x})).empty());
  CHECK(check_loss_fits(g, "binary_crossentropy", x) ==
        "binary_crossentropy needs probabilities from a sigmoid output layer, the model ends in Placeholder");
  CHECK(check_loss_fits(g, "binary_crossentropy", g.add("Softmax", {x})).find("the model ends in Softmax") !=
        std::string::npos);
  Output flat = g.placeholder("flat", DType::kF32, Shape{-1});
  CHECK(check_loss_fits(g, "binary_crossentropy", g.add("Sigmoid", {flat})).find("needs a (None, units) output") !=
        std::string::npos);
  for (const std::string name : {"mae", "huber", "mean_squared_error"})
    CHECK(check_loss_fits(g, name, g.add("Relu", {x})).empty());
}

}  // namespace
}  // namespace tctl
