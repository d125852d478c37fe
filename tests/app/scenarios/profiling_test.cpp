// Profiling a training step: independent backward and update nodes of an MLP overlap on two inter-op
// threads, and the report's rows and eager mode hold together.
#include "app/scenarios/profiling.h"

#include <doctest/doctest.h>

#include <set>

#include "models/record/train_config.h"
#include "models/train/model.h"

namespace tctl {
namespace {

// 64-`hidden`-`hidden / 2`-10, relu, relu, softmax; 128 is the digits MLP.
std::unique_ptr<Model> mlp(int inter, int hidden) {
  nlohmann::json spec = nlohmann::json::parse(R"({"input_shape": [64], "layers": [
      {"type": "Dense", "units": 128, "activation": "relu"}, {"type": "Dense", "units": 64, "activation": "relu"},
      {"type": "Dense", "units": 10, "activation": "softmax"}]})");
  spec["layers"][0]["units"] = hidden;
  spec["layers"][1]["units"] = hidden / 2;
  auto net = std::make_shared<Sequential>(Sequential::from_json(spec, "model.json", "", 42));
  ModelOptions o;
  o.metrics = {"accuracy"};
  o.inter_op_threads = inter;
  o.intra_op_threads = 1;
  return std::make_unique<Model>(net, o);
}

std::unique_ptr<Model> digits_mlp(int inter) { return mlp(inter, 128); }

// A batch of `rows` digits-shaped rows and their labels.
std::pair<Tensor, Tensor> batch(std::int64_t rows) {
  Tensor x = Tensor::zeros(DType::kF32, Shape{rows, 64});
  for (std::int64_t i = 0; i < x.num_elements(); ++i) x.mutable_data<float>()[i] = static_cast<float>(i % 17) / 17.0f;
  std::vector<std::int32_t> labels(static_cast<std::size_t>(rows));
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int32_t>(i % 10);
  return {x, Tensor::from_ints(Shape{rows}, labels)};
}

bool overlap(const ProfileEvent& a, const ProfileEvent& b) {
  return a.lane != b.lane && a.start_us < b.end_us && b.start_us < a.end_us;
}

}  // namespace

TEST_CASE("with two inter-op threads, backward and update nodes of a wide MLP overlap in the trace") {
  // 64-2048-1024-10: the second layer's weight and input gradients are 67M multiply-adds each, worth a
  // thread of their own.
  auto model = mlp(2, 2048);
  const auto [x, y] = batch(32);
  // The schedule is the machine's to choose, so look over many steps for one where two nodes of the
  // backward or update phases ran at the same time on different threads: a weight gradient beside an
  // input gradient (the only nodes here worth a thread of their own), or a cheap node beside one of them.
  int found = 0;
  std::string example;
  Profiler profiler;
  for (int step = 0; step < 300 && found == 0; ++step) {
    profiler.clear();
    model->train_step(x, y, step, &profiler);
    const auto events = profiler.events();
    for (std::size_t i = 0; i < events.size(); ++i)
      for (std::size_t j = i + 1; j < events.size(); ++j) {
        const auto& a = events[i];
        const auto& b = events[j];
        if (a.phase == Phase::kForward || b.phase == Phase::kForward || !overlap(a, b)) continue;
        if (found++ == 0) example = a.name + " with " + b.name;
      }
  }
  INFO("overlapping pair: " << example);
  CHECK(found > 0);
}

// At batch 16 its largest products are 16 x 128 x 64, half of what is worth a trip to another core.
TEST_CASE("with two inter-op threads, the digits MLP's nodes at batch 16, none worth handing off, run on one thread") {
  auto model = digits_mlp(2);
  const auto [x, y] = batch(16);
  Profiler profiler;
  std::set<int> lanes;
  for (int step = 0; step < 50; ++step) {
    profiler.clear();
    model->train_step(x, y, step, &profiler);
    for (const auto& e : profiler.events()) lanes.insert(e.lane);
  }
  CHECK(lanes.size() == 1);
}

TEST_CASE("eager mode runs every node on the calling thread, one at a time") {
  auto model = digits_mlp(2);
  Tensor x = Tensor::zeros(DType::kF32, Shape{8, 64});
  Tensor y = Tensor::from_ints(Shape{8}, std::vector<std::int32_t>(8, 3));
  Profiler profiler;
  model->eager_train_step(x, y, 0, &profiler);
  const auto events = profiler.events();
  // Every node of the traced step runs eagerly too, under the same name (the traced plan may leave out
  // a node no fetch needs; eager, like Python, runs whatever the model calls).
  Profiler traced;
  model->train_step(x, y, 0, &traced);
  std::set<std::string> eager_names;
  for (const auto& e : events) eager_names.insert(e.name);
  for (const auto& e : traced.events()) CHECK(eager_names.count(e.name) == 1);
  for (std::size_t i = 0; i < events.size(); ++i) {
    CHECK(events[i].lane == 0);
    if (i > 0) CHECK(events[i].start_us >= events[i - 1].end_us);
    if (i > 0) CHECK(events[i].node_id > events[i - 1].node_id);  // program order
  }
}

}  // namespace tctl
