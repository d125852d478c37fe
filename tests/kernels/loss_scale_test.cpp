// Dynamic loss scaling's ops (core/ops/loss_scale.cpp) and the dead values behind LossScaleFactor: a skipped
// step writes nothing, in a traced run and in eager execution alike.
#include <cmath>
#include <limits>

#include "core/eager.h"
#include "kernels/op_test_util.h"

using namespace tctl;

namespace {

std::shared_ptr<Variable> scalar_var(const std::string& name, float value) {
  return std::make_shared<Variable>(name, Tensor::scalar(value));
}

// Runs UpdateLossScale once with `finite` on the three variables.
void update_scale(const std::vector<std::shared_ptr<Variable>>& v, float finite, std::int64_t growth) {
  auto g = std::make_shared<Graph>();
  const Output u = g->add("UpdateLossScale", {g->scalar(finite)}, Attrs{{"growth_steps", growth}},
                          {{v[0], true}, {v[1], true}, {v[2], true}});
  ThreadPool inter(1), intra(1);
  Session s(g, inter, intra);
  const Output targets[] = {u};
  s.run({}, {}, targets);
}

// A step as the optimizer builds it: the gradient unscaled by LossScaleFactor(finite, scale), then an SGD
// update and the step counter's Increment gated by the factor. Returns the unscaled gradient's fetched value.
struct GatedStep {
  std::shared_ptr<Variable> w =
      std::make_shared<Variable>("w", Tensor::from_floats(Shape{2}, std::vector<float>{1.0f, 2.0f}));
  std::shared_ptr<Variable> count = scalar_var("count", 0.0f);
  std::shared_ptr<Graph> g = std::make_shared<Graph>();
  Output unscaled, update, increment, untouched;

  GatedStep(float finite, float scale, std::function<void(Graph&)> before_building = nullptr) {
    if (before_building) before_building(*g);
    const Output factor = g->add("LossScaleFactor", {g->scalar(finite), g->scalar(scale)});
    unscaled =
        g->add("MulScalar", {g->constant(Tensor::from_floats(Shape{2}, std::vector<float>{8.0f, -4.0f})), factor});
    update = g->add("ApplySgd", {unscaled, g->scalar(0.5f)}, {}, {{w, true}});
    increment = g->add("Increment", {factor}, Attrs{{"amount", 1.0}}, {{count, true}});
    // A node beside the gate runs whatever it says.
    untouched = g->add("MulScalar", {g->scalar(3.0f), g->scalar(2.0f)});
  }
  std::vector<Tensor> run() {
    ThreadPool inter(1), intra(1);
    Session s(g, inter, intra);
    const Output fetches[] = {unscaled, untouched};
    const Output targets[] = {update, increment};
    return s.run({}, fetches, targets);
  }
};

}  // namespace

TEST_CASE("AllFinite finds a NaN or an infinity in any of its inputs, on any thread count") {
  Tensor big = testing::random_tensor(Shape{100000}, 3);
  const Tensor small = Tensor::from_floats(Shape{2}, std::vector<float>{1.0f, -2.0f});
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    CHECK(testing::run_op("AllFinite", {small, big}, {}, threads).item() == 1.0f);
    for (const float bad :
         {std::nanf(""), std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
      Tensor spoiled = big.clone();
      spoiled.mutable_data<float>()[77777] = bad;
      CHECK(testing::run_op("AllFinite", {small, spoiled}, {}, threads).item() == 0.0f);
      CHECK(testing::run_op("AllFinite", {spoiled, small}, {}, threads).item() == 0.0f);
    }
  }
  // The largest float is finite.
  const Tensor edge = Tensor::from_floats(Shape{1}, std::vector<float>{std::numeric_limits<float>::max()});
  CHECK(testing::run_op("AllFinite", {edge}, {}).item() == 1.0f);
  // On the test device (TCTL_TEST_DEVICE, scripts/gpu-check.sh), the CPU's verdicts.
  if (testing::runs_on_test_device("AllFinite")) {
    Tensor spoiled = big.clone();
    spoiled.mutable_data<float>()[99999] = std::numeric_limits<float>::infinity();
    testing::compare_on_test_device("AllFinite", {small, big}, {}, Tensor::scalar(1.0f));
    testing::compare_on_test_device("AllFinite", {small, spoiled}, {}, Tensor::scalar(0.0f));
  }
}

TEST_CASE("MulScalar multiplies every element by the scalar; its gradient is dy times the scalar") {
  const Tensor x = Tensor::from_floats(Shape{2, 2}, std::vector<float>{1.5f, -2.0f, 0.0f, 3.0f});
  CHECK(testing::run_op("MulScalar", {x, Tensor::scalar(0.25f)}, {}).to_floats() ==
        std::vector<float>{0.375f, -0.5f, 0.0f, 0.75f});
  // Thread counts, the test device against the CPU, and the gradient by finite differences.
  testing::OpCheck check;
  check.constant_inputs = {1};
  testing::check_op_inputs("MulScalar", {testing::random_tensor(Shape{300, 7}, 5), Tensor::scalar(-3.5f)}, check);
}

TEST_CASE("UpdateLossScale doubles after growth_steps finite steps and halves on an overflow, within [1, 2^126]") {
  const std::vector<std::shared_ptr<Variable>> v{scalar_var("scale", 1024.0f), scalar_var("good", 0.0f),
                                                 scalar_var("skipped", 0.0f)};
  auto state = [&] { return std::vector<float>{v[0]->read().item(), v[1]->read().item(), v[2]->read().item()}; };
  update_scale(v, 1.0f, 3);
  update_scale(v, 1.0f, 3);
  CHECK(state() == std::vector<float>{1024.0f, 2.0f, 0.0f});
  update_scale(v, 1.0f, 3);  // the third finite step in a row
  CHECK(state() == std::vector<float>{2048.0f, 0.0f, 0.0f});
  update_scale(v, 1.0f, 3);
  update_scale(v, 0.0f, 3);  // an overflow: halved, the run of good steps broken, one skipped
  CHECK(state() == std::vector<float>{1024.0f, 0.0f, 1.0f});
  v[0]->assign(Tensor::scalar(1.5f));
  update_scale(v, 0.0f, 3);
  CHECK(state() == std::vector<float>{1.0f, 0.0f, 2.0f});
  update_scale(v, 0.0f, 3);
  CHECK(state()[0] == 1.0f);
  // At 2^126 a doubling would make the reciprocal the gradients are multiplied by denormal: it stays.
  v[0]->assign(Tensor::scalar(0x1p126f));
  for (int i = 0; i < 3; ++i) update_scale(v, 1.0f, 3);
  CHECK(state() == std::vector<float>{0x1p126f, 0.0f, 3.0f});
}

TEST_CASE("a finite step divides the gradient by the scale and updates; an overflowed one writes nothing") {
  GatedStep applied(1.0f, 4.0f);
  std::vector<Tensor> got = applied.run();
  CHECK(got[0].to_floats() == std::vector<float>{2.0f, -1.0f});
  CHECK(got[1].item() == 6.0f);
  CHECK(applied.w->read().to_floats() == std::vector<float>{0.0f, 2.5f});
  CHECK(applied.count->read().item() == 1.0f);

  GatedStep skipped(0.0f, 4.0f);
  got = skipped.run();
  CHECK_FALSE(got[0].defined());  // a dead value comes back undefined
  CHECK(got[1].item() == 6.0f);
  CHECK(skipped.w->read().to_floats() == std::vector<float>{1.0f, 2.0f});
  CHECK(skipped.count->read().item() == 0.0f);
  // A frame is reused: the next run of the same session starts with no value dead.
  ThreadPool inter(1), intra(1);
  Session s(skipped.g, inter, intra);
  const Output fetches[] = {skipped.untouched};
  for (int i = 0; i < 2; ++i) CHECK(s.run({}, fetches, {})[0].item() == 6.0f);
}

TEST_CASE("eager execution skips what reads a dead value as a traced run does") {
  ThreadPool intra(1);
  for (const float finite : {0.0f, 1.0f}) {
    CAPTURE(finite);
    std::unique_ptr<EagerRunner> eager;
    GatedStep step(finite, 4.0f, [&](Graph& g) { eager = std::make_unique<EagerRunner>(g, intra, EagerOptions{}); });
    CHECK(eager->value(step.unscaled).defined() == (finite != 0.0f));
    CHECK(eager->value(step.untouched).item() == 6.0f);
    CHECK(step.w->read().to_floats()[0] == (finite != 0.0f ? 0.0f : 1.0f));
    CHECK(step.count->read().item() == finite);
    eager.reset();
  }
}
