#include "models/train/optimizer.h"

#include <doctest/doctest.h>

#include <cmath>
#include <memory>

#include "core/autodiff.h"
#include "core/errors.h"
#include "core/session.h"
#include "spec_error_check.h"

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
  testing::check_spec_error([&] { parse_config(text); }, "train.json", where, {message_part});
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

  explicit OneVariable(OptimizerConfig config, const std::vector<float>& gradient = kGrad)
      : optimizer(std::move(config)) {
    Output grad = g->constant(Tensor::from_floats(Shape{3}, gradient));
    updates = optimizer.apply(*g, {w}, {grad}).apply;
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
  // Plain SGD keeps no slots, only the step counter and the learning rate.
  REQUIRE(v.optimizer.state().size() == 3);
  CHECK(v.optimizer.state()[0]->name() == "optimizer/learning_rate");
  CHECK(v.optimizer.state()[0]->read().item() == 0.1f);
  CHECK(v.optimizer.state()[1]->name() == "optimizer/learning_rate_factor");
  CHECK(v.optimizer.state()[1]->read().item() == 1.0f);
  CHECK(v.optimizer.state()[2]->name() == "optimizer/iterations");
  CHECK(v.optimizer.state()[2]->read().item() == 2.0f);
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
  REQUIRE(state.size() == 4);
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
  REQUIRE(state.size() == 5);
  CHECK(state[0]->name() == "optimizer/w/m");
  CHECK(state[1]->name() == "optimizer/w/v");
  CHECK(state[4]->name() == "optimizer/iterations");
  CHECK(state[4]->read().item() == 3.0f);
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
  OptimizerConfig adamw = parse_config(R"({"type": "adamw", "global_clipnorm": 0.5})");
  OptimizerConfig rmsprop = parse_config(R"({"type": "rmsprop"})");
  OptimizerConfig rmsprop_all = parse_config(R"({"type": "rmsprop", "momentum": 0.5, "centered": true})");
  OptimizerConfig adagrad = parse_config(R"({"type": "adagrad"})");
  for (const OptimizerConfig& config :
       {sgd(0.1), sgd(0.1, 0.9), sgd(0.1, 0.9, true), adam, adamw, rmsprop, rmsprop_all, adagrad}) {
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
    CHECK(counter_reads == (config.type == "adam" || config.type == "adamw" ? 1 : 0));
  }
}

TEST_CASE("optimizer updates of several variables land in the update phase") {
  auto a = std::make_shared<Variable>("a", Tensor::filled(Shape{2}, 1.0f));
  auto b = std::make_shared<Variable>("b", Tensor::filled(Shape{4}, 2.0f));
  Graph g;
  Optimizer opt(sgd(0.5));
  std::vector<Output> updates =
      opt.apply(g, {a, b}, {g.constant(Tensor::filled(Shape{2}, 1.0f)), g.constant(Tensor::filled(Shape{4}, 1.0f))})
          .apply;
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
  for (const std::string text :
       {R"({"type": "adam", "learning_rate": 0.02, "beta1": 0.8, "beta2": 0.99, "epsilon": 1e-8})",
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
  expect_config_error(R"({"locking": "spin"})", "optimizer.locking",
                      "unknown value \"spin\" (known: none, mutex, process, atomic, snapshot, dataflow)");
  expect_config_error(R"({"type": "nadam"})", "optimizer.type",
                      "unknown value \"nadam\" (known: sgd, adam, adamw, rmsprop, adagrad)");
  expect_config_error(R"({"type": "sgd", "learning_rate": -0.1})", "optimizer.learning_rate",
                      "expected a positive number, got -0.1");
  expect_config_error(R"({"type": "sgd", "learning_rate": 0})", "optimizer.learning_rate",
                      "expected a positive number");
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

TEST_CASE("adamw: w -= lr * wd * w, then Keras' Adam step") {
  OptimizerConfig c = parse_config(R"({"type": "adamw", "learning_rate": 0.01, "weight_decay": 0.1})");
  OneVariable v(c);
  const double lr = 0.01f, wd = 0.1, b1 = 0.9, b2 = 0.999, eps = 1e-7;
  std::vector<double> w(kW0.begin(), kW0.end()), m(3, 0.0), s(3, 0.0);
  for (int t = 1; t <= 3; ++t) {
    std::vector<float> got = v.step();
    const double lr_t = lr * std::sqrt(1.0 - std::pow(b2, t)) / (1.0 - std::pow(b1, t));
    for (std::size_t i = 0; i < 3; ++i) {
      w[i] -= lr * wd * w[i];
      m[i] = b1 * m[i] + (1 - b1) * kGrad[i];
      s[i] = b2 * s[i] + (1 - b2) * kGrad[i] * kGrad[i];
      w[i] -= lr_t * m[i] / (std::sqrt(s[i]) + eps);
      CHECK(got[i] == doctest::Approx(w[i]).epsilon(1e-5));
    }
  }
  // With a zero gradient only the decay moves the weights: w * (1 - lr wd) per step.
  OneVariable zero(c, {0.0f, 0.0f, 0.0f});
  std::vector<float> got = zero.step();
  for (std::size_t i = 0; i < 3; ++i) CHECK(got[i] == doctest::Approx(kW0[i] * (1.0 - lr * wd)).epsilon(1e-6));
}

TEST_CASE("rmsprop: Keras' update, plain, with momentum, and centered") {
  for (const std::string text :
       {R"({"type": "rmsprop", "learning_rate": 0.01})",
        R"({"type": "rmsprop", "learning_rate": 0.01, "momentum": 0.5})",
        R"({"type": "rmsprop", "learning_rate": 0.01, "rho": 0.8, "momentum": 0.5, "centered": true})"}) {
    CAPTURE(text);
    const OptimizerConfig c = parse_config(text);
    OneVariable v(c);
    const double lr = 0.01f, rho = c.rho, mu = c.momentum, eps = 1e-7;
    std::vector<double> w(kW0.begin(), kW0.end()), ms(3, 0.0), mg(3, 0.0), mom(3, 0.0);
    for (int t = 1; t <= 3; ++t) {
      std::vector<float> got = v.step();
      for (std::size_t i = 0; i < 3; ++i) {
        const double g = kGrad[i];
        ms[i] = rho * ms[i] + (1 - rho) * g * g;
        double denominator = ms[i] + eps;
        if (c.centered) {
          mg[i] = rho * mg[i] + (1 - rho) * g;
          denominator = ms[i] - mg[i] * mg[i] + eps;
        }
        double step = lr * g / std::sqrt(denominator);
        if (mu > 0) step = mom[i] = mu * mom[i] + step;
        w[i] -= step;
        CHECK(got[i] == doctest::Approx(w[i]).epsilon(1e-5));
      }
    }
    const std::size_t slots = 1 + (c.centered ? 1 : 0) + (mu > 0 ? 1 : 0);
    auto state = v.optimizer.state();
    REQUIRE(state.size() == slots + 3);
    CHECK(state[0]->name() == "optimizer/w/velocity");
    for (std::size_t i = 0; i < 3; ++i) CHECK(state[0]->read().to_floats()[i] == doctest::Approx(ms[i]).epsilon(1e-5));
  }
}

TEST_CASE("adagrad: acc starts at initial_accumulator_value; w -= lr g / sqrt(acc + eps)") {
  OneVariable v(parse_config(R"({"type": "adagrad", "learning_rate": 0.1})"));
  const double lr = 0.1f, eps = 1e-7;
  std::vector<double> w(kW0.begin(), kW0.end()), acc(3, 0.1f);
  for (int t = 1; t <= 3; ++t) {
    std::vector<float> got = v.step();
    for (std::size_t i = 0; i < 3; ++i) {
      acc[i] += static_cast<double>(kGrad[i]) * kGrad[i];
      w[i] -= lr * kGrad[i] / std::sqrt(acc[i] + eps);
      CHECK(got[i] == doctest::Approx(w[i]).epsilon(1e-5));
    }
  }
  auto state = v.optimizer.state();
  CHECK(state[0]->name() == "optimizer/w/accumulator");
  for (std::size_t i = 0; i < 3; ++i) CHECK(state[0]->read().to_floats()[i] == doctest::Approx(acc[i]).epsilon(1e-6));
}

TEST_CASE("global_clipnorm scales a gradient of known norm exactly") {
  // |(0, 3, 4)| = 5; clipped to 2.5 the gradient is halved before the SGD step.
  OptimizerConfig c = sgd(0.5);
  c.global_clipnorm = 2.5;
  OneVariable v(c, {0.0f, 3.0f, 4.0f});
  std::vector<float> got = v.step();
  CHECK(got == std::vector<float>{kW0[0], kW0[1] - 0.5f * 1.5f, kW0[2] - 0.5f * 2.0f});
  int norms = 0;
  for (const Node& n : v.g->nodes()) norms += n.op->name == "GlobalNorm";
  CHECK(norms == 1);
  // Under the limit nothing changes.
  c.global_clipnorm = 10.0;
  OneVariable under(c, {0.0f, 3.0f, 4.0f});
  CHECK(under.step() == std::vector<float>{kW0[0], kW0[1] - 0.5f * 3.0f, kW0[2] - 0.5f * 4.0f});
}

TEST_CASE("global_clipnorm takes the norm over all variables together") {
  auto a = std::make_shared<Variable>("a", Tensor::filled(Shape{1}, 0.0f));
  auto b = std::make_shared<Variable>("b", Tensor::filled(Shape{2}, 0.0f));
  auto g = std::make_shared<Graph>();
  OptimizerConfig c = sgd(1.0);
  c.global_clipnorm = 6.5;
  Optimizer opt(c);
  // Global norm sqrt(12^2 + 3^2 + 4^2) = 13: every gradient is halved.
  std::vector<Output> updates = opt.apply(*g, {a, b},
                                          {g->constant(Tensor::filled(Shape{1}, 12.0f)),
                                           g->constant(Tensor::from_floats(Shape{2}, std::vector<float>{3.0f, 4.0f}))})
                                    .apply;
  add_auto_control_dependencies(*g);
  ThreadPool inter{1}, intra{1};
  Session s(g, inter, intra);
  s.run({}, {}, updates);
  CHECK(a->read().to_floats() == std::vector<float>{-6.0f});
  CHECK(b->read().to_floats() == std::vector<float>{-1.5f, -2.0f});
}

TEST_CASE("the learning rate is a variable: begin_step changes it without retracing") {
  OptimizerConfig c = sgd(0.1);
  c.schedule = [] {
    const json j = json::parse(R"({"type": "step", "step_size": 2, "gamma": 0.5})");
    SpecReader r(j, "train.json", "optimizer.schedule");
    return ScheduleConfig::parse(r);
  }();
  OneVariable v(c);
  const int nodes = v.g->size();
  std::vector<double> w(kW0.begin(), kW0.end());
  for (std::int64_t it = 0; it < 5; ++it) {
    v.optimizer.begin_step(it);
    const float lr = static_cast<float>(0.1 * std::pow(0.5, static_cast<double>(it / 2)));
    CHECK(v.optimizer.learning_rate() == lr);
    CHECK(v.optimizer.scheduled_learning_rate(it) == doctest::Approx(0.1 * std::pow(0.5, static_cast<double>(it / 2))));
    std::vector<float> got = v.step();
    for (std::size_t i = 0; i < 3; ++i) {
      w[i] -= static_cast<double>(lr) * kGrad[i];
      CHECK(got[i] == doctest::Approx(w[i]).epsilon(1e-6));
    }
  }
  CHECK(v.g->size() == nodes);
  // Every update op reads the one learning-rate variable.
  int lr_reads = 0;
  for (const Node& n : v.g->nodes())
    lr_reads += n.op->name == "ReadVariable" && n.vars[0].var->name() == "optimizer/learning_rate";
  CHECK(lr_reads == 1);

  // The factor multiplies the schedule, and takes effect at the next begin_step.
  CHECK(v.optimizer.lr_factor() == 1.0);
  v.optimizer.set_lr_factor(0.5);
  CHECK(v.optimizer.lr_factor() == 0.5);
  CHECK(v.optimizer.learning_rate() == static_cast<float>(0.1 * 0.25));
  v.optimizer.begin_step(4);
  CHECK(v.optimizer.learning_rate() == static_cast<float>(0.1 * 0.25 * 0.5));
  CHECK(v.optimizer.scheduled_learning_rate(0) == doctest::Approx(0.05));
  // The factor lives in state(), so a checkpoint of state() keeps it.
  auto state = v.optimizer.state();
  CHECK(state[1]->name() == "optimizer/learning_rate_factor");
  CHECK(state[1]->read().item() == 0.5f);
}

TEST_CASE("a rate that changes every step still allocates nothing") {
  for (const std::string text :
       {R"({"type": "adam", "schedule": {"type": "exponential", "decay_steps": 3, "decay_rate": 0.5}})",
        R"({"type": "sgd", "momentum": 0.9, "schedule": {"type": "cosine", "decay_steps": 10, "warmup_steps": 2}})"}) {
    CAPTURE(text);
    OneVariable v(parse_config(text));
    v.optimizer.begin_step(0);
    v.session->run({}, {}, v.updates);
    const std::uint64_t before = Buffer::allocation_count();
    for (std::int64_t it = 1; it < 6; ++it) {
      v.optimizer.begin_step(it);
      v.session->run({}, {}, v.updates);
    }
    CHECK(Buffer::allocation_count() == before);
  }
}

TEST_CASE("new optimizers' defaults follow Keras and round-trip through to_json") {
  OptimizerConfig aw = parse_config(R"({"type": "adamw"})");
  CHECK(aw.learning_rate == 0.001);
  CHECK(aw.weight_decay == 0.004);
  CHECK(aw.beta1 == 0.9);
  CHECK(aw.epsilon == 1e-7);
  OptimizerConfig r = parse_config(R"({"type": "rmsprop"})");
  CHECK(r.learning_rate == 0.001);
  CHECK(r.rho == 0.9);
  CHECK(r.momentum == 0.0);
  CHECK(r.epsilon == 1e-7);
  CHECK_FALSE(r.centered);
  OptimizerConfig a = parse_config(R"({"type": "adagrad"})");
  CHECK(a.learning_rate == 0.001);
  CHECK(a.initial_accumulator_value == 0.1);
  CHECK(a.epsilon == 1e-7);
  for (
      const std::string text :
      {R"({"type": "adamw", "weight_decay": 0.01, "global_clipnorm": 1.0})",
       R"({"type": "rmsprop", "rho": 0.8, "momentum": 0.1, "centered": true, "schedule": {"type": "step", "step_size": 10}})",
       R"({"type": "adagrad", "initial_accumulator_value": 0.5, "schedule": {"type": "cosine", "decay_steps": 100, "alpha": 0.1, "warmup_steps": 5}})",
       R"({"type": "sgd", "schedule": {"type": "exponential", "decay_steps": 10, "decay_rate": 0.9, "staircase": true}})"}) {
    CAPTURE(text);
    const json j = parse_config(text).to_json();
    SpecReader reader(j, "summary.json", "config.optimizer");
    CHECK(OptimizerConfig::parse(reader).to_json() == j);
  }
}

TEST_CASE("optimizer and schedule config errors name the JSON path") {
  expect_config_error(R"({"clipnorm": 1.0})", "optimizer.clipnorm", "use global_clipnorm");
  expect_config_error(R"({"type": "sgd", "clipvalue": 1.0})", "optimizer.clipvalue", "use global_clipnorm");
  expect_config_error(R"({"global_clipnorm": 0})", "optimizer.global_clipnorm", "expected a positive number");
  expect_config_error(R"({"global_clipnorm": -1})", "optimizer.global_clipnorm", "expected a positive number");
  expect_config_error(R"({"type": "adamw", "weight_decay": -0.1})", "optimizer.weight_decay",
                      "expected a number of at least 0");
  expect_config_error(R"({"type": "adam", "weight_decay": 0.1})", "optimizer.weight_decay", "unknown key");
  expect_config_error(R"({"type": "rmsprop", "rho": 1.0})", "optimizer.rho", "expected a number in");
  expect_config_error(R"({"type": "rmsprop", "nesterov": true})", "optimizer.nesterov", "unknown key");
  expect_config_error(R"({"type": "adagrad", "initial_accumulator_value": -1})", "optimizer.initial_accumulator_value",
                      "expected a number of at least 0");
  expect_config_error(R"({"schedule": {"type": "exponential", "decay_steps": 10, "decay_rate": 0}})",
                      "optimizer.schedule.decay_rate", "expected a positive number");
  expect_config_error(R"({"schedule": {"type": "exponential", "decay_steps": 10, "decay_rate": -0.5}})",
                      "optimizer.schedule.decay_rate", "expected a positive number");
  expect_config_error(R"({"schedule": {"type": "exponential", "decay_steps": 0, "decay_rate": 0.5}})",
                      "optimizer.schedule.decay_steps", "expected a positive integer");
  expect_config_error(R"({"schedule": {"type": "step", "step_size": -3}})", "optimizer.schedule.step_size",
                      "expected a positive integer");
  expect_config_error(R"({"schedule": {"type": "step", "step_size": 3, "gamma": 0}})", "optimizer.schedule.gamma",
                      "expected a positive number");
  expect_config_error(R"({"schedule": {"type": "cosine", "decay_steps": 3, "warmup_steps": -1}})",
                      "optimizer.schedule.warmup_steps", "expected a non-negative integer");
  expect_config_error(R"({"schedule": {"type": "cosine", "decay_steps": 3, "alpha": 1.5}})", "optimizer.schedule.alpha",
                      "expected a number in");
  expect_config_error(R"({"schedule": {"type": "linear"}})", "optimizer.schedule.type",
                      "unknown value \"linear\" (known: step, exponential, cosine)");
  expect_config_error(R"({"schedule": {"decay_steps": 3}})", "optimizer.schedule.type", "needs a \"type\"");
  expect_config_error(R"({"schedule": {"type": "step", "step_size": 3, "decay_rate": 0.5}})",
                      "optimizer.schedule.decay_rate", "unknown key");
  expect_config_error(R"({"schedule": 3})", "optimizer.schedule", "");
}

}  // namespace
}  // namespace tctl
