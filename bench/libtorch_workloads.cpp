// libtorch (PyTorch's C++ API, CPU) side of bench/compare_pytorch.sh: the same workloads as
// bench/pytorch_workloads.py and tensorctl's bench_workloads, with the same command line and the same one
// line of JSON on stdout:
//
//   {"workload": "mlp_digits_b32", "threads": 2, "value": 12345.6, "unit": "samples/s",
//    "setting": "at 2 x openblas 1", "reps": [...]}
//
// Usage: libtorch_workloads --workload NAME --threads T [--reps N]
//
// --threads sets ATen's intra-op threads (at::set_num_threads). Debian's libtorch does its matrix products in
// OpenBLAS, whose thread count comes from OPENBLAS_NUM_THREADS in the environment (set it before starting);
// "threads" in the output is the larger of the two (the thread count T of compare_pytorch.sh's grid). Training
// workloads report samples/s with Adam (lr 1e-3, eps 1e-7) on fixed random batches; infer_b1 reports microseconds per
// forward call of the 64-128-64-10 MLP at batch 1 under NoGradGuard. Warm-up is not timed; the value is the median of
// the repetitions, all of which are listed in "reps".
//
// Built by compare_pytorch.sh: g++ -O2 -std=c++17 against Debian's libtorch-dev.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace {

struct Workload {
  std::string kind;  // mlp64, mlp784, cnn, cnn32, infer
  int64_t batch;
  int steps;   // per repetition (calls for infer)
  int warmup;  // untimed steps (calls) first
};

const std::map<std::string, Workload> kWorkloads = {
    {"mlp_digits_b32", {"mlp64", 32, 200, 30}}, {"mlp_digits_b256", {"mlp64", 256, 200, 30}},
    {"mlp784_b128", {"mlp784", 128, 30, 5}},    {"cnn_digits_b64", {"cnn", 64, 200, 30}},
    {"infer_b1", {"infer", 1, 5000, 500}},      {"cnn32_b64", {"cnn32", 64, 10, 2}},
};
constexpr int kBatches = 16;  // distinct random batches, cycled through

// Dense layers with ReLU between them and none after the last: the logits, which cross_entropy turns into
// softmax + sparse categorical cross-entropy.
torch::nn::Sequential make_mlp(const std::vector<int64_t>& sizes) {
  torch::nn::Sequential net;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    net->push_back(torch::nn::Linear(sizes[i], sizes[i + 1]));
    if (i + 2 < sizes.size()) net->push_back(torch::nn::ReLU());
  }
  return net;
}

// NCHW [batch, 1, 8, 8] -> conv 16 3x3 same, relu, pool 2 -> conv 32 3x3 same, relu, pool 2 -> 128 -> 64 -> 10.
torch::nn::Sequential make_cnn() {
  using namespace torch::nn;
  return Sequential(Conv2d(Conv2dOptions(1, 16, 3).padding(1)), ReLU(), MaxPool2d(MaxPool2dOptions(2)),
                    Conv2d(Conv2dOptions(16, 32, 3).padding(1)), ReLU(), MaxPool2d(MaxPool2dOptions(2)), Flatten(),
                    Linear(128, 64), ReLU(), Linear(64, 10));
}

// NCHW [batch, 3, 32, 32] -> conv 32, conv 32, pool 2 -> conv 64, conv 64, pool 2 (3x3 same, relu) -> 4096 ->
// 256 -> 10 (configs/models/cnn_32x32x3.json).
torch::nn::Sequential make_cnn32() {
  using namespace torch::nn;
  return Sequential(Conv2d(Conv2dOptions(3, 32, 3).padding(1)), ReLU(), Conv2d(Conv2dOptions(32, 32, 3).padding(1)),
                    ReLU(), MaxPool2d(MaxPool2dOptions(2)), Conv2d(Conv2dOptions(32, 64, 3).padding(1)), ReLU(),
                    Conv2d(Conv2dOptions(64, 64, 3).padding(1)), ReLU(), MaxPool2d(MaxPool2dOptions(2)), Flatten(),
                    Linear(4096, 256), ReLU(), Linear(256, 10));
}

torch::nn::Sequential make_model(const std::string& kind, std::vector<int64_t>& example_shape) {
  if (kind == "cnn32") {
    example_shape = {3, 32, 32};
    return make_cnn32();
  }
  if (kind == "mlp64" || kind == "infer") {
    example_shape = {64};
    return make_mlp({64, 128, 64, 10});
  }
  if (kind == "mlp784") {
    example_shape = {784};
    return make_mlp({784, 512, 512, 10});
  }
  example_shape = {1, 8, 8};
  return make_cnn();
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<double> bench_train(const Workload& w, int reps) {
  std::vector<int64_t> shape;
  torch::nn::Sequential model = make_model(w.kind, shape);
  std::vector<int64_t> batch_shape = {w.batch};
  batch_shape.insert(batch_shape.end(), shape.begin(), shape.end());
  std::vector<torch::Tensor> xs, ys;
  for (int i = 0; i < kBatches; ++i) {
    xs.push_back(torch::rand(batch_shape) * 2 - 1);
    ys.push_back(torch::randint(0, 10, {w.batch}, torch::kLong));
  }
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3).eps(1e-7));
  auto run = [&](int n) {
    torch::Tensor loss;
    for (int i = 0; i < n; ++i) {
      opt.zero_grad();
      loss = torch::nn::functional::cross_entropy(model->forward(xs[i % kBatches]), ys[i % kBatches]);
      loss.backward();
      opt.step();
    }
    return loss.item<float>();
  };
  run(w.warmup);
  std::vector<double> values;
  for (int r = 0; r < reps; ++r) {
    const auto t = std::chrono::steady_clock::now();
    run(w.steps);
    values.push_back(static_cast<double>(w.steps) * static_cast<double>(w.batch) / seconds_since(t));
  }
  return values;
}

std::vector<double> bench_infer(const Workload& w, int reps) {
  std::vector<int64_t> shape;
  torch::nn::Sequential model = make_model(w.kind, shape);
  model->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::rand({1, shape[0]}) * 2 - 1;
  float sink = 0;
  for (int i = 0; i < w.warmup; ++i) sink += model->forward(x).data_ptr<float>()[0];
  std::vector<double> values;
  for (int r = 0; r < reps; ++r) {
    const auto t = std::chrono::steady_clock::now();
    for (int i = 0; i < w.steps; ++i) sink += model->forward(x).data_ptr<float>()[0];
    values.push_back(seconds_since(t) / w.steps * 1e6);
  }
  if (sink == 12345.0f) std::fprintf(stderr, " ");  // keeps the outputs alive
  return values;
}

int usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s --workload NAME --threads T [--reps N]\nworkloads:", argv0);
  for (const auto& kv : kWorkloads) std::fprintf(stderr, " %s", kv.first.c_str());
  std::fprintf(stderr, "\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string name;
  int threads = 1, reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage(argv[0]);
    if (a == "--workload")
      name = argv[++i];
    else if (a == "--threads")
      threads = std::atoi(argv[++i]);
    else if (a == "--reps")
      reps = std::atoi(argv[++i]);
    else
      return usage(argv[0]);
  }
  const auto it = kWorkloads.find(name);
  if (it == kWorkloads.end() || threads < 1 || reps < 1) return usage(argv[0]);
  const char* blas = std::getenv("OPENBLAS_NUM_THREADS");
  if (blas == nullptr) {
    std::fprintf(stderr, "libtorch_workloads: set OPENBLAS_NUM_THREADS before starting\n");
    return 2;
  }
  at::set_num_interop_threads(1);
  at::set_num_threads(threads);
  torch::manual_seed(1);

  const Workload& w = it->second;
  const bool infer = w.kind == "infer";
  const std::vector<double> values = infer ? bench_infer(w, reps) : bench_train(w, reps);
  std::string list;
  for (double v : values) list += (list.empty() ? "" : ", ") + std::to_string(v);
  std::printf(
      "{\"workload\": \"%s\", \"threads\": %d, \"value\": %.3f, \"unit\": \"%s\", \"setting\": \"at %d x "
      "openblas %s\", \"reps\": [%s], \"torch\": \"%s\"}\n",
      name.c_str(), std::max(threads, std::atoi(blas)), median(values), infer ? "us/call" : "samples/s", threads, blas,
      list.c_str(), TORCH_VERSION);
  return 0;
}
