// tensorctl's side of bench/compare_pytorch.sh: one workload at one thread count, printed as one JSON line,
//   {"workload": "mlp_digits_b32", "threads": 2, "value": 412345.6, "unit": "samples/s", "setting": "inter 2 x intra 1"}
// Workloads (Adam, learning rate 1e-3, epsilon 1e-7; random inputs in [-1, 1], random labels):
//   mlp_digits_b32, mlp_digits_b256  MLP 64-128-64-10 (relu, relu, softmax), training, batch 32 / 256
//   mlp784_b128                      MLP 784-512-512-10, training, batch 128
//   cnn_digits_b64                   the digits CNN of configs/models/digits_cnn.json, training, batch 64
//   infer_b1                         the 64-128-64-10 MLP's forward pass at batch 1, microseconds per call
// With T threads every split of the cores that uses at most T busy threads is tried (inter T x intra 1 and
// inter 1 x intra T) and the best is reported with its setting. Each setting: one warm-up repetition, then
// the median of 5.
//
// Usage: bench_workloads --workload NAME --threads T
#include <chrono>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/bench_util.h"
#include "core/thread_pool.h"
#include "models/model.h"
#include "models/spec_reader.h"

using namespace tctl;

namespace {

const char* kDigitsMlp = R"({"input_shape": [64], "layers": [{"type": "Dense", "units": 128, "activation": "relu"},
    {"type": "Dense", "units": 64, "activation": "relu"}, {"type": "Dense", "units": 10, "activation": "softmax"}]})";
const char* kMlp784 = R"({"input_shape": [784], "layers": [{"type": "Dense", "units": 512, "activation": "relu"},
    {"type": "Dense", "units": 512, "activation": "relu"}, {"type": "Dense", "units": 10, "activation": "softmax"}]})";
const char* kCnn = R"({"input_shape": [8, 8, 1], "layers": [
    {"type": "Conv2D", "filters": 16, "kernel_size": 3, "padding": "same", "activation": "relu"}, {"type": "MaxPooling2D", "pool_size": 2},
    {"type": "Conv2D", "filters": 32, "kernel_size": 3, "padding": "same", "activation": "relu"}, {"type": "MaxPooling2D", "pool_size": 2},
    {"type": "Flatten"}, {"type": "Dense", "units": 64, "activation": "relu"}, {"type": "Dense", "units": 10, "activation": "softmax"}]})";

struct Workload {
  const char* spec;
  std::int64_t batch;
  int steps;  // per repetition
  bool inference;
};

Workload workload(const std::string& name) {
  if (name == "mlp_digits_b32") return {kDigitsMlp, 32, 400, false};
  if (name == "mlp_digits_b256") return {kDigitsMlp, 256, 100, false};
  if (name == "mlp784_b128") return {kMlp784, 128, 30, false};
  if (name == "cnn_digits_b64") return {kCnn, 64, 100, false};
  if (name == "infer_b1") return {kDigitsMlp, 1, 5000, true};
  throw std::runtime_error("unknown workload " + name +
                           " (known: mlp_digits_b32, mlp_digits_b256, mlp784_b128, cnn_digits_b64, infer_b1)");
}

// Samples per second (training) or microseconds per call (inference) at one thread setting.
double measure(const Workload& w, int inter, int intra) {
  const nlohmann::json spec = nlohmann::json::parse(w.spec);
  ModelOptions o;
  o.inter_op_threads = inter;
  o.intra_op_threads = intra;
  o.seed = 1;
  o.optimizer.type = "adam";
  o.optimizer.learning_rate = 1e-3;
  o.optimizer.epsilon = 1e-7;
  Model model(std::make_shared<Sequential>(Sequential::from_json(spec, "workload", "", 1)), o);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<Tensor> xs, ys;
  for (int b = 0; b < 8; ++b) {
    Tensor x = Tensor::empty(DType::kF32, Shape::concat(w.batch, model.net().input_shape()));
    for (std::int64_t i = 0; i < x.num_elements(); ++i) x.mutable_data<float>()[i] = u(rng);
    std::vector<std::int32_t> labels(static_cast<std::size_t>(w.batch));
    for (auto& l : labels) l = static_cast<std::int32_t>(rng() % 10);
    xs.push_back(x);
    ys.push_back(Tensor::from_ints(Shape{w.batch}, labels));
  }
  std::vector<double> values;
  std::int64_t step = 0;
  for (int rep = 0; rep < 6; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    for (int s = 0; s < w.steps; ++s, ++step) {
      const std::size_t k = static_cast<std::size_t>(step) % xs.size();
      if (w.inference) {
        model.forward_step(xs[k]);
      } else {
        model.train_step(xs[k], ys[k], step);
      }
    }
    const double elapsed = bench::seconds_since(start);
    if (rep == 0) continue;  // warm-up
    values.push_back(w.inference ? elapsed * 1e6 / w.steps : static_cast<double>(w.steps * w.batch) / elapsed);
  }
  return bench::median(values);
}

}  // namespace

int main(int argc, char** argv) {
  std::string name;
  int threads = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--workload") name = argv[i + 1];
    if (a == "--threads") threads = std::stoi(argv[i + 1]);
  }
  try {
    const Workload w = workload(name);
    std::vector<std::pair<int, int>> settings{{threads, 1}};
    if (threads > 1) settings.emplace_back(1, threads);
    double best = 0;
    std::string best_setting;
    for (auto [inter, intra] : settings) {
      const double v = measure(w, inter, intra);
      const bool better = best_setting.empty() || (w.inference ? v < best : v > best);
      if (!better) continue;
      best = v;
      best_setting = fmt::format("inter {} x intra {}", inter, intra);
    }
    fmt::print(R"({{"workload": "{}", "threads": {}, "value": {:.1f}, "unit": "{}", "setting": "{}"}})"
               "\n",
               name, threads, best, w.inference ? "us/call" : "samples/s", best_setting);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_workloads: {}\n", e.what());
    return 2;
  }
  return 0;
}
