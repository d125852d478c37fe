#include "kernels/op_test_util.h"

using namespace tctl;

namespace {
// Runs one update op on `var` with gradient g (and extra variables as slots).
void run_update(const std::string& op, const Attrs& attrs, std::vector<VarUse> vars, const Tensor& grad,
                std::vector<Output> extra_inputs_builder(Graph&) = nullptr) {
  auto g = std::make_shared<Graph>();
  Output gr = g->constant(grad);
  std::vector<Output> ins{gr};
  if (extra_inputs_builder) {
    auto more = extra_inputs_builder(*g);
    ins.insert(ins.end(), more.begin(), more.end());
  }
  Output u = g->add(op, ins, attrs, std::move(vars));
  ThreadPool inter(1), intra(1);
  Session s(g, inter, intra);
  std::vector<Output> targets{u};
  s.run({}, {}, targets);
}
}  // namespace

TEST_CASE("ApplySgd and ApplyMomentum follow Keras' formulas") {
  auto w = std::make_shared<Variable>("w", Tensor::from_floats(Shape{2}, std::vector<float>{1.0f, 2.0f}));
  Tensor grad = Tensor::from_floats(Shape{2}, std::vector<float>{0.5f, -1.0f});
  run_update("ApplySgd", Attrs{{"learning_rate", 0.1}}, {{w, true}}, grad);
  CHECK(w->read().to_floats() == std::vector<float>{0.95f, 2.1f});

  auto v = std::make_shared<Variable>("v", Tensor::zeros(DType::kF32, Shape{2}));
  Attrs m{{"learning_rate", 0.1}, {"momentum", 0.9}};
  run_update("ApplyMomentum", m, {{w, true}, {v, true}}, grad);
  run_update("ApplyMomentum", m, {{w, true}, {v, true}}, grad);
  // v1 = -0.05, w = 0.90; v2 = 0.9 * -0.05 - 0.05 = -0.095, w = 0.805
  CHECK(w->read().to_floats()[0] == doctest::Approx(0.805));
}

TEST_CASE("ApplyAdam's first step moves each weight by about the learning rate") {
  auto w = std::make_shared<Variable>("w", Tensor::from_floats(Shape{2}, std::vector<float>{1.0f, 1.0f}));
  auto m = std::make_shared<Variable>("m", Tensor::zeros(DType::kF32, Shape{2}));
  auto v = std::make_shared<Variable>("v", Tensor::zeros(DType::kF32, Shape{2}));
  Attrs a{{"learning_rate", 0.01}, {"beta1", 0.9}, {"beta2", 0.999}, {"epsilon", 1e-7}};
  run_update("ApplyAdam", a, {{w, true}, {m, true}, {v, true}},
             Tensor::from_floats(Shape{2}, std::vector<float>{0.3f, -4.0f}),
             [](Graph& g) { return std::vector<Output>{g.scalar(0.0f)}; });
  auto r = w->read().to_floats();
  CHECK(r[0] == doctest::Approx(0.99).epsilon(1e-4));
  CHECK(r[1] == doctest::Approx(1.01).epsilon(1e-4));
  CHECK(m->read().to_floats()[0] == doctest::Approx(0.03));
}

TEST_CASE("an update never changes a snapshot read before it") {
  auto w = std::make_shared<Variable>("w", Tensor::from_floats(Shape{2}, std::vector<float>{1.0f, 2.0f}));
  Tensor before = w->read();
  run_update("ApplySgd", Attrs{{"learning_rate", 1.0}}, {{w, true}},
             Tensor::from_floats(Shape{2}, std::vector<float>{1.0f, 1.0f}));
  CHECK(before.to_floats() == std::vector<float>{1.0f, 2.0f});
  CHECK(w->read().to_floats() == std::vector<float>{0.0f, 1.0f});
}
