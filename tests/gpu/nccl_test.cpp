// NCCL on the GPU machine, one rank (it has one GPU, and NCCL takes one rank per GPU): a worker alone in its
// collective on cuda:0 makes its communicator, all-reduces each gradient bucket there by ncclAllReduce, and
// trains a plain run's bits (tests/models/train/mirrored_test.cpp checks the same on sim:0 everywhere).
// Where NCCL cannot be loaded, the run says so and all-reduces on the CPU. Two ranks are tested on CPU only,
// through MPI (tests/cli/multi_worker_test.cpp, sim:0 included).
#include <doctest/doctest.h>

#include <cstring>
#include <random>

#include "core/collective.h"
#include "models/train/model.h"

namespace tctl {
namespace {

const char* const kNcclMlp = R"({"input_shape": [8], "layers": [
  {"type": "Dense", "units": 16, "activation": "relu"},
  {"type": "Dense", "units": 4, "activation": "softmax"}]})";

std::unique_ptr<Model> nccl_model(std::shared_ptr<Collective> workers) {
  ModelOptions o;
  o.optimizer.type = "adam";
  o.optimizer.learning_rate = 0.01;
  o.inter_op_threads = 1;
  o.intra_op_threads = 1;
  o.seed = 5;
  o.device = "cuda:0";
  o.workers = std::move(workers);
  std::vector<std::shared_ptr<Sequential>> nets{
      std::make_shared<Sequential>(Sequential::from_json(nlohmann::json::parse(kNcclMlp), "m.json", "", 3))};
  return std::make_unique<Model>(std::move(nets), o);
}

// Ten steps of 64 random rows; the weights after them.
std::vector<float> trained_weights(Model& model) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (int step = 0; step < 10; ++step) {
    std::vector<float> x(64 * 8);
    for (float& v : x) v = normal(rng);
    std::vector<std::int32_t> y(64);
    for (auto& v : y) v = static_cast<std::int32_t>(rng() % 4);
    model.train_batch(Tensor::from_floats(Shape{64, 8}, x), Tensor::from_ints(Shape{64}, y), step);
  }
  std::vector<float> out;
  for (const auto& v : model.net().variables()) {
    const std::vector<float> w = v->read().to_floats();
    out.insert(out.end(), w.begin(), w.end());
  }
  return out;
}

}  // namespace

TEST_SUITE("gpu training") {
  TEST_CASE("one worker on cuda:0 all-reduces by NCCL there and trains a plain run's bits") {
    auto plain = nccl_model(nullptr);
    auto worker = nccl_model(CollectiveGroup::create(1));
    std::vector<std::string> devices;
    for (const Node& n : worker->training_graph().nodes())
      if (n.op->name == "AllReduce") devices.push_back(n.device);
    for (const auto& w : worker->placement_warnings()) MESSAGE(w);
    if (devices == std::vector<std::string>{"cpu"}) {
      // NCCL absent: said once, and the run goes on all-reducing on the CPU.
      REQUIRE(worker->placement_warnings().size() == 1);
      CHECK(worker->placement_warnings()[0].rfind("gradients all-reduced on the cpu: NCCL could not be loaded", 0) ==
            0);
      return;
    }
    CHECK(devices == std::vector<std::string>{"cuda:0"});
    CHECK(worker->placement_warnings().empty());
    const std::vector<float> a = trained_weights(*plain), b = trained_weights(*worker);
    REQUIRE(a.size() == b.size());
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  }
}

}  // namespace tctl
