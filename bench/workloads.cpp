// tensorctl's side of bench/compare_pytorch.sh: one workload at one thread count, printed as one JSON line,
//   {"workload": "mlp_digits_b32", "threads": 2, "value": 412345.6, "unit": "samples/s", "setting": "inter 2 x intra
//   1"}
// Workloads (Adam, learning rate 1e-3, epsilon 1e-7; random inputs in [-1, 1], random labels):
//   mlp_digits_b32, mlp_digits_b256  MLP 64-128-64-10 (relu, relu, softmax), training, batch 32 / 256
//   mlp784_b128                      MLP 784-512-512-10, training, batch 128
//   cnn_digits_b64                   the digits CNN of configs/models/digits_cnn.json, training, batch 64
//   infer_b1                         the 64-128-64-10 MLP's forward pass at batch 1, microseconds per call
//   mlp2048_b1024                    MLP 784-2048-2048-10, training, batch 1024 (a GPU workload)
//   cnn_digits_b512                  the digits CNN, training, batch 512 (a GPU workload)
//   cnn32_b64, cnn32_b256            configs/models/cnn_32x32x3.json: conv 32-conv 32-pool-conv 64-conv 64-pool-
//                                    dense 256-10 on 32x32x3 inputs, training, batch 64 / 256 (the latter a GPU
//                                    workload)
//   lstm_text_b64                    Embedding(20000, 128) - LSTM(128) - dense 10 (softmax) on 200 random token
//                                    ids, training, batch 64 (issue 48's text classifier)
//   lstm_infer_b1                    that model's forward pass at batch 1, microseconds per call
//   transformer_text_b32             TokenAndPositionEmbedding(20000, 128, 128) - two TransformerEncoders (4 heads,
//                                    feedforward 512) - GlobalAveragePooling1D - dense 10 (softmax) on 128
//                                    random token ids, training, batch 32 (issue 48's encoder classifier)
//   mlp_W0-W1-...-Wn_bB              any MLP (relu hidden layers, softmax output) at batch B, training, as
//                                    bench/scaling.sh sweeps them: mlp_784-1024-1024-10_b128
// `--device cuda:0` runs every layer there (bench/compare_pytorch_gpu.sh); the batches are fed from the
// host every step, as a data pipeline would, and each step's loss comes back to the host.
// With T threads every split of the cores that uses at most T busy threads is tried (inter T x intra 1 and
// inter 1 x intra T) and the best is reported with its setting. Each setting: one warm-up repetition, then
// the median of 5, each after a quarter of a repetition untimed. For the MLPs, each repetition is followed by a
// measurement of the step's sgemm limit (bench/gemm_limit.h) on T OpenBLAS threads in the same process, and the line
// also gives that limit and the median of the per-repetition ratios ("of_limit"), so the ratio does not depend on how
// fast the machine happened to be in another process.
//
// `--memory` instead trains mlp784_b128 for 5 epochs of 8,192 synthetic rows and prints, as one JSON line,
// the resident memory the training added over the process's baseline (peak and after each epoch) against
// the budget: weights, gradients, Adam's two moments, one batch of activations and the data set.
//
// `--precision mixed_bfloat16` (or mixed_float16) runs the products in that policy's type (ModelOptions::
// compute_type; without loss scaling, which costs a guard per step but changes no product).
//
// Usage: bench_workloads --workload NAME --threads T [--device DEVICE] [--device-graphs 1] [--precision P]
//        bench_workloads --memory
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bench/bench_util.h"
#include "bench/gemm_limit.h"
#include "core/thread_pool.h"
#include "models/data/dataset.h"
#include "models/io/spec_reader.h"
#include "models/record/precision.h"
#include "models/train/model.h"
#include "models/train/trainer.h"

using namespace tctl;

namespace {

const char* kDigitsMlp = R"({"input_shape": [64], "layers": [{"type": "Dense", "units": 128, "activation": "relu"},
    {"type": "Dense", "units": 64, "activation": "relu"}, {"type": "Dense", "units": 10, "activation": "softmax"}]})";
const char* kMlp784 = R"({"input_shape": [784], "layers": [{"type": "Dense", "units": 512, "activation": "relu"},
    {"type": "Dense", "units": 512, "activation": "relu"}, {"type": "Dense", "units": 10, "activation": "softmax"}]})";
const char* kMlp2048 = R"({"input_shape": [784], "layers": [{"type": "Dense", "units": 2048, "activation": "relu"},
    {"type": "Dense", "units": 2048, "activation": "relu"}, {"type": "Dense", "units": 10, "activation": "softmax"}]})";
const char* kCnn = R"({"input_shape": [8, 8, 1], "layers": [
    {"type": "Conv2D", "filters": 16, "kernel_size": 3, "padding": "same", "activation": "relu"}, {"type": "MaxPooling2D", "pool_size": 2},
    {"type": "Conv2D", "filters": 32, "kernel_size": 3, "padding": "same", "activation": "relu"}, {"type": "MaxPooling2D", "pool_size": 2},
    {"type": "Flatten"}, {"type": "Dense", "units": 64, "activation": "relu"}, {"type": "Dense", "units": 10, "activation": "softmax"}]})";

const char* kCnn32 = R"({"input_shape": [32, 32, 3], "layers": [
    {"type": "Conv2D", "filters": 32, "kernel_size": 3, "padding": "same", "activation": "relu"},
    {"type": "Conv2D", "filters": 32, "kernel_size": 3, "padding": "same", "activation": "relu"}, {"type": "MaxPooling2D", "pool_size": 2},
    {"type": "Conv2D", "filters": 64, "kernel_size": 3, "padding": "same", "activation": "relu"},
    {"type": "Conv2D", "filters": 64, "kernel_size": 3, "padding": "same", "activation": "relu"}, {"type": "MaxPooling2D", "pool_size": 2},
    {"type": "Flatten"}, {"type": "Dense", "units": 256, "activation": "relu"}, {"type": "Dense", "units": 10, "activation": "softmax"}]})";

const char* kLstmText = R"({"input_shape": [200], "layers": [
    {"type": "Embedding", "input_dim": 20000, "output_dim": 128}, {"type": "LSTM", "units": 128},
    {"type": "Dense", "units": 10, "activation": "softmax"}]})";

const char* kTransformerText = R"({"input_shape": [128], "layers": [
    {"type": "TokenAndPositionEmbedding", "vocabulary_size": 20000, "sequence_length": 128, "embedding_dim": 128},
    {"type": "TransformerEncoder", "intermediate_dim": 512, "num_heads": 4},
    {"type": "TransformerEncoder", "intermediate_dim": 512, "num_heads": 4},
    {"type": "GlobalAveragePooling1D"}, {"type": "Dense", "units": 10, "activation": "softmax"}]})";

struct Workload {
  std::string spec;
  std::int64_t batch;
  int steps;  // per repetition
  bool inference;
  std::vector<int> widths;     // an MLP's layer widths, for its sgemm limit; empty for other models
  std::int64_t token_ids = 0;  // > 0: the inputs are random token ids in [0, token_ids), not floats in [-1, 1]
};

struct Measured {
  double value = 0;     // samples/s, or us/call for inference
  double limit = 0;     // the sgemm limit in samples/s, when measured
  double of_limit = 0;  // median of value / limit per repetition
};

// "mlp_784-1024-1024-10_b128": the widths and the batch; steps per repetition for about 5 GFLOP each.
Workload parametric_mlp(const std::string& name) {
  const std::size_t b = name.rfind("_b");
  std::vector<int> widths;
  std::string text = name.substr(4, b == std::string::npos ? std::string::npos : b - 4);
  std::replace(text.begin(), text.end(), '-', ',');
  if (b == std::string::npos || b < 5 || (widths = bench::parse_list(text)).size() < 2)
    throw std::runtime_error("a parametric MLP is named mlp_W0-W1-...-Wn_bB, not " + name);
  const std::int64_t batch = std::stoll(name.substr(b + 2));
  nlohmann::json layers = nlohmann::json::array();
  double weights = 0;
  for (std::size_t l = 1; l < widths.size(); ++l) {
    layers.push_back(
        {{"type", "Dense"}, {"units", widths[l]}, {"activation", l + 1 < widths.size() ? "relu" : "softmax"}});
    weights += static_cast<double>(widths[l - 1]) * widths[l];
  }
  const nlohmann::json spec = {{"input_shape", {widths[0]}}, {"layers", layers}};
  const double step_flops = 6.0 * static_cast<double>(batch) * weights;
  const int steps = static_cast<int>(std::clamp(5e9 / step_flops, 5.0, 2000.0));
  return {spec.dump(), batch, steps, false, widths};
}

Workload workload(const std::string& name) {
  if (name.rfind("mlp_", 0) == 0 && name.find('-') != std::string::npos) return parametric_mlp(name);
  if (name == "mlp_digits_b32") return {kDigitsMlp, 32, 2000, false, {64, 128, 64, 10}};
  if (name == "mlp_digits_b256") return {kDigitsMlp, 256, 400, false, {64, 128, 64, 10}};
  if (name == "mlp784_b128") return {kMlp784, 128, 30, false, {784, 512, 512, 10}};
  if (name == "cnn_digits_b64") return {kCnn, 64, 100, false};
  if (name == "infer_b1") return {kDigitsMlp, 1, 20000, true};
  if (name == "mlp2048_b1024") return {kMlp2048, 1024, 30, false, {784, 2048, 2048, 10}};
  if (name == "cnn_digits_b512") return {kCnn, 512, 100, false};
  if (name == "cnn32_b64") return {kCnn32, 64, 10, false};
  if (name == "cnn32_b256") return {kCnn32, 256, 20, false};
  if (name == "lstm_text_b64") return {kLstmText, 64, 5, false, {}, 20000};
  if (name == "lstm_infer_b1") return {kLstmText, 1, 200, true, {}, 20000};
  if (name == "transformer_text_b32") return {kTransformerText, 32, 5, false, {}, 20000};
  throw std::runtime_error("unknown workload " + name +
                           " (known: mlp_digits_b32, mlp_digits_b256, mlp784_b128, cnn_digits_b64, infer_b1, "
                           "mlp2048_b1024, cnn_digits_b512, cnn32_b64, cnn32_b256, lstm_text_b64, lstm_infer_b1, "
                           "transformer_text_b32, mlp_W0-W1-...-Wn_bB)");
}

// Samples per second (training) or microseconds per call (inference) at one thread setting, and for the
// MLPs the sgemm limit on `threads` OpenBLAS threads, measured after each repetition.
Measured measure(const Workload& w, int inter, int intra, int threads, const std::string& device, bool graphs,
                 const std::string& precision) {
  const nlohmann::json spec = nlohmann::json::parse(w.spec);
  ModelOptions o;
  o.device = device;
  o.device_graphs = graphs;
  o.compute_type = precision_compute_type(precision);
  o.placement.strict = true;
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
    for (std::int64_t i = 0; i < x.num_elements(); ++i)
      x.mutable_data<float>()[i] =
          w.token_ids > 0 ? static_cast<float>(rng() % static_cast<std::uint64_t>(w.token_ids)) : u(rng);
    std::vector<std::int32_t> labels(static_cast<std::size_t>(w.batch));
    for (auto& l : labels) l = static_cast<std::int32_t>(rng() % 10);
    xs.push_back(x);
    ys.push_back(Tensor::from_ints(Shape{w.batch}, labels));
  }
  std::vector<double> values, limits, ratios;
  std::int64_t step = 0;
  const auto run_steps = [&](int count) {
    for (int s = 0; s < count; ++s, ++step) {
      const std::size_t k = static_cast<std::size_t>(step) % xs.size();
      if (w.inference) {
        model.forward_step(xs[k]);
      } else {
        model.train_step(xs[k], ys[k], step);
      }
    }
  };
  for (int rep = 0; rep < 6; ++rep) {
    // A quarter of a repetition, not timed: after the previous repetition's limit (and the pause after it on
    // several threads) the caches hold OpenBLAS's buffers and the core may have slowed down while idle.
    if (rep > 0) run_steps(std::max(1, w.steps / 4));
    const auto start = std::chrono::steady_clock::now();
    run_steps(w.steps);
    const double elapsed = bench::seconds_since(start);
    if (rep == 0) continue;  // warm-up
    values.push_back(w.inference ? elapsed * 1e6 / w.steps : static_cast<double>(w.steps * w.batch) / elapsed);
    if (w.widths.empty() || device != "cpu") continue;  // the CPU's sgemm limit means nothing on a GPU
    const double gemm = bench::mlp_gemm_step(w.widths, static_cast<int>(w.batch), threads, 3).seconds;
    // OpenBLAS's own workers, woken by a limit on several threads, spin on a core for a while before they
    // sleep (about 0.1 s): the next repetition would share its cores with them (the digits MLP at batch 256
    // on 2 threads measured 640k samples/s so and 870k without the limit). Let them fall asleep first.
    if (threads > 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    limits.push_back(static_cast<double>(w.batch) / gemm);
    ratios.push_back(values.back() / limits.back());
  }
  Measured m{bench::median(values)};
  if (!limits.empty()) {
    m.limit = bench::median(limits);
    m.of_limit = bench::median(ratios);
  }
  return m;
}

// Resident set size now, from /proc/self/statm, in bytes.
double rss_now() {
  std::ifstream statm("/proc/self/statm");
  long pages_total = 0, pages_resident = 0;
  statm >> pages_total >> pages_resident;
  return static_cast<double>(pages_resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

double rss_peak() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0;
}

int memory() {
  // The baseline: the process with OpenBLAS and the thread pools warmed up on a throwaway model.
  {
    ModelOptions warm;
    warm.inter_op_threads = warm.intra_op_threads = 1;
    Model m(std::make_shared<Sequential>(Sequential::from_json(nlohmann::json::parse(kDigitsMlp), "w", "", 1)), warm);
    m.train_step(Tensor::zeros(DType::kF32, Shape{32, 64}),
                 Tensor::from_ints(Shape{32}, std::vector<std::int32_t>(32, 0)), 0);
  }
  const double base = rss_now();
  const std::int64_t rows = 8192, batch = 128;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Dataset data;
  data.x = Tensor::empty(DType::kF32, Shape{rows, 784});
  for (std::int64_t i = 0; i < data.x.num_elements(); ++i) data.x.mutable_data<float>()[i] = u(rng);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(rows));
  for (auto& l : labels) l = static_cast<std::int32_t>(rng() % 10);
  data.y = Tensor::from_ints(Shape{rows}, labels);
  data.num_classes = 10;
  ModelOptions o;
  o.inter_op_threads = o.intra_op_threads = 1;
  o.metrics = {"accuracy"};
  Model model(std::make_shared<Sequential>(Sequential::from_json(nlohmann::json::parse(kMlp784), "m", "", 1)), o);
  const double params = static_cast<double>(model.net().param_count());
  // Weights, gradients, two Adam moments; activations of one batch: each layer's output before and after
  // its activation, and the gradient flowing back through it, plus the input batch.
  const double activations = static_cast<double>(batch) * (784 + 3.0 * (512 + 512 + 10));
  const double budget = 4.0 * (4.0 * params + activations) + static_cast<double>(data.x.bytes() + data.y.bytes());
  std::vector<double> after_epoch;
  for (const auto& r : Trainer(model).fit(data, nullptr, 5, batch)) {
    (void)r;
    after_epoch.push_back(rss_now() - base);
  }
  std::string epochs;
  for (double a : after_epoch) epochs += (epochs.empty() ? "" : ", ") + fmt::format("{:.2f}", a / 1e6);
  fmt::print(
      R"({{"workload": "memory_mlp784_b128", "budget_mb": {:.2f}, "peak_added_mb": {:.2f}, "ratio": {:.2f}, "after_epoch_mb": [{}]}})"
      "\n",
      budget / 1e6, (rss_peak() - base) / 1e6, (rss_peak() - base) / budget, epochs);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--memory") return memory();
  std::string name;
  int threads = 1;
  std::string device = "cpu";
  bool graphs = false;                // --device-graphs 1: replay each step's device part (a CUDA graph on cuda)
  std::string precision = "float32";  // --precision mixed_bfloat16: the products' operands in bfloat16
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--workload") name = argv[i + 1];
    if (a == "--threads") threads = std::stoi(argv[i + 1]);
    if (a == "--device") device = argv[i + 1];
    if (a == "--device-graphs") graphs = std::string(argv[i + 1]) == "1";
    if (a == "--precision") precision = argv[i + 1];
  }
  try {
    const Workload w = workload(name);
    std::vector<std::pair<int, int>> settings{{threads, 1}};
    if (threads > 1) settings.emplace_back(1, threads);
    Measured best;
    std::string best_setting;
    for (auto [inter, intra] : settings) {
      const Measured m = measure(w, inter, intra, threads, device, graphs, precision);
      const bool better = best_setting.empty() || (w.inference ? m.value < best.value : m.value > best.value);
      if (!better) continue;
      best = m;
      best_setting = fmt::format("inter {} x intra {}", inter, intra);
    }
    const std::string limit = w.widths.empty() || device != "cpu"
                                  ? ""
                                  : fmt::format(R"(, "limit": {:.1f}, "of_limit": {:.3f})", best.limit, best.of_limit);
    fmt::print(
        R"({{"workload": "{}", "threads": {}, "device": "{}", "device_graphs": {}, "precision": "{}", "value": {:.2f}, )"
        R"("unit": "{}", "setting": "{}"{}}})"
        "\n",
        name, threads, device, graphs, precision, best.value, w.inference ? "us/call" : "samples/s", best_setting,
        limit);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_workloads: {}\n", e.what());
    return 2;
  }
  return 0;
}
