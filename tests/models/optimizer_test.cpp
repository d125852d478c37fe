#include "models/optimizer.h"

#include <doctest/doctest.h>

#include <cmath>
#include <memory>

#include "core/autodiff.h"
#include "core/errors.h"
#include "core/session.h"

namespace tctl {
namespace {

using nlohmann::json;

OptimizerConfig parse_config(const std::string& text) {
  const json j = json::parse(text);
  SpecReader reader(j, "train.json", "optimizer");
  return OptimizerConfig::parse(reader);
}

void expect_config_error(const std::string& text, const std::string& where, const std::string& message_part) {
  INFO("optimizer: " << text);
  try {
    parse_config(text);
    FAIL("expected a SpecError at " << where);
  } catch (const SpecError& e) {
    INFO("error: " << std::string(e.what()));
    CHECK(e.file() == "train.json");
    CHECK(e.where() == where);
    CHECK(e.message().find(message_part) != std::string::npos);
  }
}

const std::vector<float> kW0{1.0f, -2.0f, 0.5f};
const std::vector<float> kGrad{0.1f, -0.4f, 2.0f};

// One variable w updated by a fixed gradient; run() takes one optimizer step.
struct OneVariable {
  std::shared_ptr<Variable> w = std::make_shared<Variable>("w", Tensor::from_floats(Shape{3}, kW0));
  std::shared_ptr<Graph> g = std::make_shared<Graph>();
  Optimizer optimizer;
  std::vector<Output> updates;
  ThreadPool inter{1}, intra{1};
  std::unique_ptr<Session> session;

  explicit OneVariable(OptimizerConfig config) : optimizer(std::move(config)) {
    Output grad = g->constant(Tensor::from_floats(Shape{3}, kGrad));
    updates = optimizer.apply(*g, {w}, {grad});
    add_auto_control_dependencies(*g);
    session = std::make_unique<Session>(g, inter, intra);
  }
  std::vector<float> step() {
    session->run({}, {}, updates);
    return w->read().to_floats();
  }
};

OptimizerConfig sgd(double lr, double momentum = 0.0, bool nesterov = false) {
  OptimizerConfig c;
  c.type = "sgd";
  c.learning_rate = lr;
  c.momentum = momentum;
  c.nesterov = nesterov;
  return c;
}

TEST_CASE("sgd: w -= lr * g") {
  OneVariable v(sgd(0.1));
  std::vector<double> w(kW0.begin(), kW0.end());
  for (int step = 0; step < 2; ++step) {
    std::vector<float> got = v.step();
    for (std::size_t i = 0; i < 3; ++i) {
      w[i] -= static_cast<double>(0.1f) * kGrad[i];
      CHECK(got[i] == doctest::Approx(w[i]).epsilon(1e-6));
    }
  }
  // Plain SGD keeps no slots, only the step counter.
  REQUIRE(v.optimizer.state().size() == 1);
  CHECK(v.optimizer.state()[0]->name() == "optimizer/iterations");
  CHECK(v.optimizer.state()[0]->read().item() == 2.0f);
}

TEST_CASE("momentum: v = mu v - lr g; w += v (Keras)") {
  OneVariable v(sgd(0.1, 0.9));
  std::vector<double> w(kW0.begin(), kW0.end()), vel(3, 0.0);
  for (int step = 0; step < 3; ++step) {
    std::vector<float> got = v.step();
    for (std::size_t i = 0; i < 3; ++i) {
      vel[i] = 0.9 * vel[i] - 0.1 * kGrad[i];
      w[i] += vel[i];
      CHECK(got[i] == doctest::Approx(w[i]).epsilon(1e-5));
    }
  }
  auto state = v.optimizer.state();
  REQUIRE(state.size() == 2);
  CHECK(state[0]->name() == "optimizer/w/velocity");
  CHECK_FALSE(state[0]->trainable());
  for (std::size_t i = 0; i < 3; ++i) CHECK(state[0]->read().to_floats()[i] == doctest::Approx(vel[i]).epsilon(1e-5));
}

TEST_CASE("nesterov momentum: v = mu v - lr g; w += mu v - lr g (Keras)") {
  OneVariable v(sgd(0.1, 0.9, true));
  std::vector<double> w(kW0.begin(), kW0.end()), vel(3, 0.0);
  for (int step = 0; step < 3; ++step) {
    std::vector<float> got = v.step();
    for (std::size_t i = 0; i < 3; ++i) {
      vel[i] = 0.9 * vel[i] - 0.1 * kGrad[i];
      w[i] += 0.9 * vel[i] - 0.1 * kGrad[i];
      CHECK(got[i] == doctest::Approx(w[i]).epsilon(1e-5));
    }
  }
}

TEST_CASE("adam: Keras' bias-corrected update, with the step counter") {
  OptimizerConfig c;  // adam defaults
  c.learning_rate = 0.01;
  OneVariable v(c);
  const double b1 = 0.9, b2 = 0.999, eps = 1e-7;
  std::vector<double> w(kW0.begin(), kW0.end()), m(3, 0.0), s(3, 0.0);
  for (int t = 1; t <= 3; ++t) {
    std::vector<float> got = v.step();
    const double lr_t = 0.01 * std::sqrt(1.0 - std::pow(b2, t)) / (1.0 - std::pow(b1, t));
    for (std::size_t i = 0; i < 3; ++i) {
      m[i] = b1 * m[i] + (1 - b1) * kGrad[i];
      s[i] = b2 * s[i] + (1 - b2) * kGrad[i] * kGrad[i];
      w[i] -= lr_t * m[i] / (std::sqrt(s[i]) + eps);
      CHECK(got[i] == doctest::Approx(w[i]).epsilon(1e-5));
    }
  }
  // The first Adam step moves each weight by about lr, whatever the gradient's size.
  auto state = v.optimizer.state();
  REQUIRE(state.size() == 3);
  CHECK(state[0]->name() == "optimizer/w/m");
  CHECK(state[1]->name() == "optimizer/w/v");
  CHECK(state[2]->name() == "optimizer/iterations");
  CHECK(state[2]->read().item() == 3.0f);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(state[0]->read().to_floats()[i] == doctest::Approx(m[i]).epsilon(1e-5));
    CHECK(state[1]->read().to_floats()[i] == doctest::Approx(s[i]).epsilon(1e-5));
  }
}

TEST_CASE("adam's first step moves every weight by about the learning rate") {
  OptimizerConfig c;
  c.learning_rate = 0.001;
  OneVariable v(c);
  std::vector<float> got = v.step();
  for (std::size_t i = 0; i < 3; ++i)
    CHECK(kW0[i] - got[i] == doctest::Approx(0.001 * (kGrad[i] > 0 ? 1 : -1)).epsilon(1e-3));
}

TEST_CASE("optimizer steps update in place: no buffer is allocated once running") {
  OptimizerConfig adam;
  for (const OptimizerConfig& config : {sgd(0.1), sgd(0.1, 0.9), sgd(0.1, 0.9, true), adam}) {
    INFO(config.to_json().dump());
    OneVariable v(config);
    v.session->run({}, {}, v.updates);
    const std::uint64_t before = Buffer::allocation_count();
    for (int i = 0; i < 5; ++i) v.session->run({}, {}, v.updates);
    CHECK(Buffer::allocation_count() == before);
    // Only Adam reads the step counter; an unused read would hold a snapshot that each increment copies.
    int counter_reads = 0;
    for (const Node& n : v.g->nodes())
      counter_reads += n.op->name == "ReadVariable" && n.vars[0].var->name() == "optimizer/iterations";
    CHECK(counter_reads == (config.type == "adam" ? 1 : 0));
  }
}

TEST_CASE("optimizer updates of several variables land in the update phase") {
  auto a = std::make_shared<Variable>("a", Tensor::filled(Shape{2}, 1.0f));
  auto b = std::make_shared<Variable>("b", Tensor::filled(Shape{4}, 2.0f));
  Graph g;
  Optimizer opt(sgd(0.5));
  std::vector<Output> updates =
      opt.apply(g, {a, b}, {g.constant(Tensor::filled(Shape{2}, 1.0f)), g.constant(Tensor::filled(Shape{4}, 1.0f))});
  CHECK(updates.size() == 3);  // one per variable, then the step counter
  for (Output u : updates) {
    CHECK(g.node(u).phase == Phase::kUpdate);
    CHECK(g.node(u).layer == "optimizer");
  }
  CHECK(g.node(updates.back()).op->name == "Increment");
}

TEST_CASE("OptimizerConfig defaults follow Keras") {
  OptimizerConfig adam = parse_config(R"({})");
  CHECK(adam.type == "adam");
  CHECK(adam.learning_rate == 0.001);
  CHECK(adam.beta1 == 0.9);
  CHECK(adam.beta2 == 0.999);
  CHECK(adam.epsilon == 1e-7);
  OptimizerConfig s = parse_config(R"({"type": "sgd"})");
  CHECK(s.learning_rate == 0.01);
  CHECK(s.momentum == 0.0);
  CHECK_FALSE(s.nesterov);
  OptimizerConfig m = parse_config(R"({"type": "sgd", "learning_rate": 0.1, "momentum": 0.9, "nesterov": true})");
  CHECK(m.learning_rate == 0.1);
  CHECK(m.momentum == 0.9);
  CHECK(m.nesterov);
}

TEST_CASE("OptimizerConfig::to_json parses back to the same config") {
  for (const std::string text : {R"({"type": "adam", "learning_rate": 0.02, "beta1": 0.8, "beta2": 0.99, "epsilon": 1e-8})",
                           R"({"type": "sgd", "momentum": 0.5, "nesterov": true})"}) {
    CAPTURE(text);
    OptimizerConfig c = parse_config(text);
    const json j = c.to_json();
    SpecReader reader(j, "model.json", "optimizer");
    CHECK(OptimizerConfig::parse(reader).to_json() == j);
  }
  CHECK(parse_config(R"({"type": "sgd"})").to_json() ==
        json{{"type", "sgd"}, {"learning_rate", 0.01}, {"momentum", 0.0}, {"nesterov", false}, {"locking", "mutex"}});
  CHECK(parse_config(R"({"locking": "atomic"})").locking == LockingMode::kAtomic);
}

TEST_CASE("OptimizerConfig errors name the JSON path") {
  expect_config_error(R"({"locking": "spin"})", "optimizer.locking", "unknown value \"spin\" (known: none, mutex, process, atomic, snapshot, dataflow)");
  expect_config_error(R"({"type": "rmsprop"})", "optimizer.type", "unknown value \"rmsprop\" (known: sgd, adam)");
  expect_config_error(R"({"type": "sgd", "learning_rate": -0.1})", "optimizer.learning_rate", "expected a positive number, got -0.1");
  expect_config_error(R"({"type": "sgd", "learning_rate": 0})", "optimizer.learning_rate", "expected a positive number");
  expect_config_error(R"({"learning_rate": "fast"})", "optimizer.learning_rate", "expected a number, got \"fast\"");
  expect_config_error(R"({"type": "sgd", "momentum": 1.0})", "optimizer.momentum", "expected a number in");
  expect_config_error(R"({"type": "sgd", "momentum": -0.5})", "optimizer.momentum", "expected a number in");
  expect_config_error(R"({"type": "sgd", "nesterov": 1})", "optimizer.nesterov", "expected true or false");
  expect_config_error(R"({"beta1": 1.0})", "optimizer.beta1", "expected a number in");
  expect_config_error(R"({"beta2": -0.1})", "optimizer.beta2", "expected a number in");
  expect_config_error(R"({"epsilon": 0})", "optimizer.epsilon", "expected a positive number, got 0");
  // Keys of the other optimizer are unknown here, not silently ignored.
  expect_config_error(R"({"type": "sgd", "beta1": 0.9})", "optimizer.beta1", "unknown key");
  expect_config_error(R"({"type": "adam", "momentum": 0.9})", "optimizer.momentum", "unknown key");
  expect_config_error(R"({"type": "adam", "learning_rat": 0.1})", "optimizer.learning_rat", "unknown key");
}

}  // namespace
}  // namespace tctl
