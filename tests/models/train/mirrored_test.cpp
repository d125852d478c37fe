// Mirrored data parallelism (ModelOptions::replica_devices): replicas split each batch, all-reduce their
// gradients and apply the same update, so they hold the same bits after every step, and those bits are
// what one replica at the same global batch computes up to the order of its sums.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "core/errors.h"
#include "models/train/model.h"

namespace tctl {
namespace {

const char* const kMlp = R"({"input_shape": [8], "layers": [
  {"type": "Dense", "units": 16, "activation": "relu"},
  {"type": "Dense", "units": 4, "activation": "softmax"}]})";

const char* const kDropoutMlp = R"({"input_shape": [8], "layers": [
  {"type": "Dense", "units": 32, "activation": "relu"},
  {"type": "Dropout", "rate": 0.5},
  {"type": "Dense", "units": 4, "activation": "softmax"}]})";

// A model of `spec` with one replica per device (one device: no strategy), Adam, one thread per pool.
std::unique_ptr<Model> make_model(const char* spec, const std::vector<std::string>& devices,
                                  std::int64_t bucket_bytes = std::int64_t{4} << 20, bool device_graphs = false) {
  ModelOptions o;
  o.device_graphs = device_graphs;
  o.optimizer.type = "adam";
  o.optimizer.learning_rate = 0.01;
  o.inter_op_threads = 1;
  o.intra_op_threads = 1;
  o.seed = 5;
  o.bucket_bytes = bucket_bytes;
  if (devices.size() > 1) o.replica_devices = devices;
  o.device = devices[0];
  std::vector<std::shared_ptr<Sequential>> nets;
  for (std::size_t r = 0; r < devices.size(); ++r)
    nets.push_back(std::make_shared<Sequential>(Sequential::from_json(nlohmann::json::parse(spec), "m.json", "", 3)));
  return std::make_unique<Model>(std::move(nets), o);
}

struct Batch {
  Tensor x, y;
};

// Batches of `rows` rows of random features and labels, the same for every caller with the same seed.
std::vector<Batch> batches(int count, std::int64_t rows, unsigned seed = 11) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<Batch> out;
  for (int b = 0; b < count; ++b) {
    std::vector<float> x(static_cast<std::size_t>(rows * 8));
    for (float& v : x) v = normal(rng);
    std::vector<std::int32_t> y(static_cast<std::size_t>(rows));
    for (auto& v : y) v = static_cast<std::int32_t>(rng() % 4);
    out.push_back({Tensor::from_floats(Shape{rows, 8}, x), Tensor::from_ints(Shape{rows}, y)});
  }
  return out;
}

std::vector<std::vector<float>> weights_of(const Sequential& net) {
  std::vector<std::vector<float>> out;
  for (const auto& v : net.variables()) out.push_back(v->read().to_floats());
  return out;
}

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0)
      return false;
  return true;
}

// The largest |a - b| of a tensor over its largest |b|, across tensors: the relative error of the weights.
double relative_difference(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    double scale = 0.0, diff = 0.0;
    for (std::size_t k = 0; k < a[i].size(); ++k) {
      scale = std::max(scale, static_cast<double>(std::abs(b[i][k])));
      diff = std::max(diff, static_cast<double>(std::abs(a[i][k] - b[i][k])));
    }
    worst = std::max(worst, scale > 0 ? diff / scale : diff);
  }
  return worst;
}

// Trains `model` on the batches, steps numbered from 0; returns the losses.
std::vector<float> train(Model& model, const std::vector<Batch>& data) {
  std::vector<float> losses;
  for (std::size_t s = 0; s < data.size(); ++s)
    losses.push_back(model.train_batch(data[s].x, data[s].y, static_cast<std::int64_t>(s))[0].item());
  return losses;
}

void check_replicas_agree(const Model& model) {
  const auto first = weights_of(model.replica_net(0));
  for (int r = 1; r < model.replicas(); ++r) {
    CAPTURE(r);
    CHECK(same_bits(weights_of(model.replica_net(r)), first));
  }
}

// Every replica holds the same bits, and they are within `tolerance` of one replica trained on the same
// global batches (the sums over the batch are added in another order, so not bit for bit).
void check_matches_one_replica(const char* spec, const std::vector<std::string>& devices,
                               const std::vector<Batch>& data, double tolerance = 1e-6) {
  auto one = make_model(spec, {"cpu"});
  auto mirrored = make_model(spec, devices);
  REQUIRE(mirrored->replicas() == static_cast<int>(devices.size()));
  CHECK(same_bits(weights_of(mirrored->net()), weights_of(one->net())));  // the same start
  const auto one_losses = train(*one, data);
  const auto mirrored_losses = train(*mirrored, data);
  check_replicas_agree(*mirrored);
  const double diff = relative_difference(weights_of(mirrored->net()), weights_of(one->net()));
  MESSAGE("relative difference to one replica after ", data.size(), " steps: ", diff);
  CHECK(diff <= tolerance);
  CHECK(diff > 0.0);  // trained apart: the comparison compares something
  for (std::size_t s = 0; s < data.size(); ++s)
    CHECK(mirrored_losses[s] == doctest::Approx(one_losses[s]).epsilon(1e-5));
  CHECK(!same_bits(weights_of(mirrored->net()), weights_of(make_model(spec, {"cpu"})->net())));  // it trained
}

}  // namespace

TEST_CASE("two mirrored replicas hold the same bits after every step, within 1e-6 of one replica at batch 64") {
  check_matches_one_replica(kMlp, {"cpu", "cpu"}, batches(20, 64));
}

TEST_CASE("three replicas, and batches they do not divide, weight each replica by its rows") {
  check_matches_one_replica(kMlp, {"cpu", "cpu", "cpu"}, batches(12, 64));
  // 5 rows: 2, 2 and 1; 2 rows: the third replica gets none, runs a row with weight 0 and adds nothing.
  check_matches_one_replica(kMlp, {"cpu", "cpu", "cpu"}, batches(12, 5, 3));
  check_matches_one_replica(kMlp, {"cpu", "cpu", "cpu"}, batches(6, 2, 4));
}

TEST_CASE("replicas draw dropout masks where one replica would for their rows of the batch") {
  // With masks of their own (each replica's rows drawn from element 0), the weights part by far more.
  check_matches_one_replica(kDropoutMlp, {"cpu", "cpu"}, batches(15, 64), 2e-6);
}

TEST_CASE("BatchNormalization's moving statistics stay identical across replicas, the replicas' mean") {
  const char* const spec = R"({"input_shape": [8], "layers": [
    {"type": "Dense", "units": 16}, {"type": "BatchNormalization", "momentum": 0.5},
    {"type": "Dense", "units": 4, "activation": "softmax"}]})";
  auto model = make_model(spec, {"cpu", "cpu"});
  auto one = make_model(spec, {"cpu"});
  // Each replica normalizes with its own rows' statistics, so the replicas' gradients are not one
  // replica's at the whole batch, and the weights part from it after the first step; the moving mean of
  // that first step is comparable: the mean of the replicas' batch means, the whole batch's.
  train(*model, batches(1, 64));
  train(*one, batches(1, 64));
  check_replicas_agree(*model);
  train(*model, batches(6, 64, 12));
  check_replicas_agree(*model);
  // (The moving variance, the mean of the replicas' variances, leaves out the spread between their means,
  // as TensorFlow's does; it is not compared.)
  model = make_model(spec, {"cpu", "cpu"});
  train(*model, batches(1, 64));
  const auto& vars = model->net().variables();
  for (std::size_t i = 0; i < vars.size(); ++i) {
    if (vars[i]->name().find("moving_mean") == std::string::npos) continue;
    const auto mirrored = vars[i]->read().to_floats();
    const auto single = one->net().variables()[i]->read().to_floats();
    for (std::size_t k = 0; k < mirrored.size(); ++k) CHECK(mirrored[k] == doctest::Approx(single[k]).epsilon(1e-4));
  }
}

TEST_CASE("gradients in many small buckets give the bits of one bucket") {
  const auto data = batches(10, 32);
  auto fused = make_model(kMlp, {"cpu", "cpu"});
  auto split = make_model(kMlp, {"cpu", "cpu"}, 1);  // one gradient per all-reduce
  train(*fused, data);
  train(*split, data);
  CHECK(same_bits(weights_of(fused->net()), weights_of(split->net())));
  CHECK(fused->all_reduce_totals().calls == 10);
  CHECK(split->all_reduce_totals().calls == 40);  // two kernels, two biases
  CHECK(split->all_reduce_totals().steps == 10);
  CHECK(fused->all_reduce_totals().bytes == 10 * 4 * (8 * 16 + 16 + 16 * 4 + 4));
}

TEST_CASE("a replica on sim:0 computes the bits of a replica on the CPU") {
  const auto data = batches(10, 64);
  auto cpu = make_model(kMlp, {"cpu", "cpu"});
  auto sim = make_model(kMlp, {"cpu", "sim:0"});
  train(*cpu, data);
  train(*sim, data);
  check_replicas_agree(*sim);
  CHECK(same_bits(weights_of(sim->replica_net(1)), weights_of(cpu->replica_net(1))));
}

// The devices the training graph's AllReduce nodes ask for, one entry per node.
std::vector<std::string> all_reduce_devices(const Model& model) {
  std::vector<std::string> out;
  for (const Node& n : model.training_graph().nodes())
    if (n.op->name == "AllReduce") out.push_back(n.device);
  return out;
}

// Whether placement moved an AllReduce or FlatSlice to the CPU (a line "all_reduce/AllReduce: op AllReduce
// has no kernel for sim:0, running on cpu"), or the model chose the CPU for them.
bool all_reduce_fell_back(const Model& model) {
  for (const auto& w : model.placement_warnings())
    if (w.rfind("all_reduce/", 0) == 0 || w.find("gradients all-reduced on the cpu") != std::string::npos) return true;
  return false;
}

TEST_CASE("replicas on sim all-reduce there, with the CPU's bits, two of them on one device too") {
  const auto data = batches(10, 64);
  auto cpu = make_model(kMlp, {"cpu", "cpu"});
  train(*cpu, data);
  CHECK(all_reduce_devices(*cpu) == std::vector<std::string>{"cpu"});
  for (const auto& devices : {std::vector<std::string>{"sim:0", "sim:1"}, std::vector<std::string>{"sim:1", "sim:1"},
                              std::vector<std::string>{"sim:0", "sim:1", "graphs"}}) {
    CAPTURE(devices[0] + " " + devices[1]);
    // With device graphs the all-reduce stays out of every recording: a replay would meet under a past step's key.
    auto sim = make_model(kMlp, {devices[0], devices[1]}, std::int64_t{4} << 20, devices.size() > 2);
    CHECK(all_reduce_devices(*sim) == std::vector<std::string>{devices[0]});
    CHECK(!all_reduce_fell_back(*sim));
    train(*sim, data);
    check_replicas_agree(*sim);
    CHECK(same_bits(weights_of(sim->net()), weights_of(cpu->net())));
    CHECK(sim->all_reduce_totals().calls == 10);
    if (devices.size() > 2) CHECK(sim->training_graph_replays() > 0);
  }
}

// A worker alone in its collective, as one rank of NCCL on the GPU machine (tests/gpu/nccl_test.cpp): the
// all-reduce weighs by 1 and sums one member, so the run keeps a plain run's bits.
TEST_CASE("one worker on sim:0 all-reduces there and trains the bits of a plain run") {
  const auto data = batches(10, 64);
  auto plain = make_model(kMlp, {"sim:0"});
  ModelOptions o = plain->options();
  o.workers = CollectiveGroup::create(1);
  std::vector<std::shared_ptr<Sequential>> nets{
      std::make_shared<Sequential>(Sequential::from_json(nlohmann::json::parse(kMlp), "m.json", "", 3))};
  Model worker(std::move(nets), o);
  CHECK(all_reduce_devices(worker) == std::vector<std::string>{"sim:0"});
  CHECK(!all_reduce_fell_back(worker));
  train(*plain, data);
  train(worker, data);
  CHECK(same_bits(weights_of(worker.net()), weights_of(plain->net())));
  CHECK(worker.all_reduce_totals().calls == 10);
}

TEST_CASE("a gradient that is not finite on one replica fails the step on all of them, and the next step runs") {
  auto data = batches(3, 64);
  auto model = make_model(kMlp, {"cpu", "cpu"});
  train(*model, {data[0]});
  const auto before = weights_of(model->net());
  // A NaN in the second replica's rows (rows 32..63) only: the all-reduced gradients are NaN on both.
  Tensor bad = data[1].x.clone();
  bad.mutable_data<float>()[40 * 8 + 3] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_AS(model->train_batch(bad, data[1].y, 1), NonFiniteError);
  // The first replica wrote no NaN (each update refuses its own gradient), and the others agree with it.
  for (const auto& w : weights_of(model->net()))
    for (float v : w) REQUIRE(std::isfinite(v));
  check_replicas_agree(*model);
  model->train_batch(data[2].x, data[2].y, 2);
  check_replicas_agree(*model);
  CHECK(!same_bits(weights_of(model->net()), before));
}

TEST_CASE(
    "hogwild: workers share one replica; in a locked mode every update sticks, each counted by the step "
    "counter") {
  for (const LockingMode mode : {LockingMode::kMutex, LockingMode::kAtomic, LockingMode::kNone}) {
    CAPTURE(locking_mode_name(mode));
    ModelOptions o;
    o.optimizer.type = "adam";
    o.optimizer.learning_rate = 0.01;
    o.optimizer.locking = mode;
    o.inter_op_threads = 1;
    o.intra_op_threads = 1;
    o.hogwild_workers = 4;
    Model model(std::make_shared<Sequential>(Sequential::from_json(nlohmann::json::parse(kMlp), "m.json", "", 3, mode)),
                o);
    const auto losses = train(model, batches(25, 64));
    const HogwildTotals h = model.hogwild_totals();
    CHECK(h.steps == 25);
    CHECK(h.expected == 100);  // four workers' updates a step
    if (mode == LockingMode::kNone) {
      CHECK(h.applied <= h.expected);  // lost ones are allowed, and not reproducible
    } else {
      CHECK(h.applied == 100);
    }
    CHECK(losses.back() < losses.front());
  }
}

TEST_CASE("sync_replicas copies the first replica's weights and optimizer state to the others") {
  auto model = make_model(kMlp, {"cpu", "cpu"});
  train(*model, batches(2, 16));
  // What a checkpoint restore does: write the first replica alone.
  for (const auto& v : model->net().variables()) v->assign(Tensor::filled(v->shape(), 0.25f));
  CHECK(!same_bits(weights_of(model->replica_net(1)), weights_of(model->net())));
  model->sync_replicas();
  check_replicas_agree(*model);
}

}  // namespace tctl
