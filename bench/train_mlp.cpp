// Training throughput of the digits MLP (64-128-64-10, Adam, batch 32 by default) in tensorctl, against a
// hand-written reference loop in the same process: cblas_sgemm, fused bias/ReLU, fused softmax
// cross-entropy and one Adam pass per parameter, with preallocated buffers. Both run on one thread per
// setting (OpenBLAS single-threaded). Prints samples/s, the median of 5 repetitions, and the ratio.
//
// Usage: bench_train_mlp [--batch N] [--steps N] [--threads LIST] [--hidden A,B]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/bench_util.h"
#include "core/thread_pool.h"
#include "models/data/dataset.h"
#include "models/train/model.h"

using namespace tctl;
using tctl::bench::median;
using tctl::bench::parse_list;
using tctl::bench::seconds_since;

namespace {

// The reference: the same MLP trained by a plain loop.
class ReferenceMlp {
 public:
  ReferenceMlp(std::vector<int> sizes, int batch) : sizes_(std::move(sizes)), batch_(batch) {
    std::mt19937_64 rng(1);
    for (std::size_t l = 0; l + 1 < sizes_.size(); ++l) {
      const int in = sizes_[l], out = sizes_[l + 1];
      const float limit = std::sqrt(6.0f / static_cast<float>(in + out));
      Layer layer;
      layer.w.resize(static_cast<std::size_t>(in * out));
      for (auto& x : layer.w) x = (static_cast<float>(rng() >> 40) / 16777216.0f * 2.0f - 1.0f) * limit;
      layer.b.assign(static_cast<std::size_t>(out), 0.0f);
      layer.mw.assign(layer.w.size(), 0.0f);
      layer.vw.assign(layer.w.size(), 0.0f);
      layer.mb.assign(layer.b.size(), 0.0f);
      layer.vb.assign(layer.b.size(), 0.0f);
      layer.gw.assign(layer.w.size(), 0.0f);
      layer.gb.assign(layer.b.size(), 0.0f);
      layers_.push_back(std::move(layer));
    }
    for (int s : sizes_) {
      acts_.emplace_back(static_cast<std::size_t>(batch * s));
      grads_.emplace_back(static_cast<std::size_t>(batch * s));
    }
  }

  float step(const float* x, const std::int32_t* labels) {
    std::memcpy(acts_[0].data(), x, acts_[0].size() * sizeof(float));
    const std::size_t n_layers = layers_.size();
    for (std::size_t l = 0; l < n_layers; ++l) {
      const int in = sizes_[l], out = sizes_[l + 1];
      float* y = acts_[l + 1].data();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch_, out, in, 1.0f, acts_[l].data(), in,
                  layers_[l].w.data(), out, 0.0f, y, out);
      const bool relu = l + 1 < n_layers;
      for (int r = 0; r < batch_; ++r)
        for (int j = 0; j < out; ++j) {
          float v = y[r * out + j] + layers_[l].b[static_cast<std::size_t>(j)];
          y[r * out + j] = relu && v < 0.0f ? 0.0f : v;
        }
    }
    // Fused softmax cross-entropy and its gradient.
    const int c = sizes_.back();
    float loss = 0.0f;
    float* logits = acts_.back().data();
    float* dlogits = grads_.back().data();
    for (int r = 0; r < batch_; ++r) {
      float mx = *std::max_element(logits + r * c, logits + (r + 1) * c), sum = 0.0f;
      for (int j = 0; j < c; ++j) sum += (dlogits[r * c + j] = std::exp(logits[r * c + j] - mx));
      for (int j = 0; j < c; ++j) dlogits[r * c + j] /= sum;
      loss += std::log(sum) + mx - logits[r * c + labels[r]];
      dlogits[r * c + labels[r]] -= 1.0f;
      for (int j = 0; j < c; ++j) dlogits[r * c + j] /= static_cast<float>(batch_);
    }
    ++t_;
    for (std::size_t l = n_layers; l-- > 0;) {
      const int in = sizes_[l], out = sizes_[l + 1];
      Layer& L = layers_[l];
      const float* dy = grads_[l + 1].data();
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, in, out, batch_, 1.0f, acts_[l].data(), in, dy, out, 0.0f,
                  L.gw.data(), out);
      std::fill(L.gb.begin(), L.gb.end(), 0.0f);
      for (int r = 0; r < batch_; ++r)
        for (int j = 0; j < out; ++j) L.gb[static_cast<std::size_t>(j)] += dy[r * out + j];
      if (l > 0) {
        float* dx = grads_[l].data();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch_, in, out, 1.0f, dy, out, L.w.data(), out, 0.0f, dx,
                    in);
        const float* a = acts_[l].data();
        for (std::size_t i = 0; i < grads_[l].size(); ++i)
          if (a[i] <= 0.0f) dx[i] = 0.0f;
      }
      adam(L.w, L.mw, L.vw, L.gw);
      adam(L.b, L.mb, L.vb, L.gb);
    }
    return loss / static_cast<float>(batch_);
  }

 private:
  struct Layer {
    std::vector<float> w, b, mw, vw, mb, vb, gw, gb;
  };
  void adam(std::vector<float>& w, std::vector<float>& m, std::vector<float>& v, const std::vector<float>& g) const {
    const float lr_t = static_cast<float>(0.001 * std::sqrt(1.0 - std::pow(0.999, t_)) / (1.0 - std::pow(0.9, t_)));
    for (std::size_t i = 0; i < w.size(); ++i) {
      m[i] = 0.9f * m[i] + 0.1f * g[i];
      v[i] = 0.999f * v[i] + 0.001f * g[i] * g[i];
      w[i] -= lr_t * m[i] / (std::sqrt(v[i]) + 1e-7f);
    }
  }
  std::vector<int> sizes_;
  int batch_;
  std::vector<Layer> layers_;
  std::vector<std::vector<float>> acts_, grads_;
  int t_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  int batch = 32, steps = 400;
  std::vector<int> threads{1, 2};
  std::vector<int> hidden{128, 64};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--batch") batch = std::stoi(argv[i + 1]);
    if (a == "--steps") steps = std::stoi(argv[i + 1]);
    if (a == "--threads") threads = parse_list(argv[i + 1]);
    if (a == "--hidden") hidden = parse_list(argv[i + 1]);
  }
  // Batches cycled in a fixed order: the data is the same for both sides.
  const bench::Batches data = bench::digits_batches(batch, Shape{64});
  const std::vector<Tensor>& xs = data.xs;
  const std::vector<Tensor>& ys = data.ys;
  std::vector<int> sizes{64};
  sizes.insert(sizes.end(), hidden.begin(), hidden.end());
  sizes.push_back(10);
  std::string arch;
  for (int s : sizes) arch += std::string(arch.empty() ? "" : "-") + std::to_string(s);

  nlohmann::json layers = nlohmann::json::array();
  for (int h : hidden) layers.push_back({{"type", "Dense"}, {"units", h}, {"activation", "relu"}});
  layers.push_back({{"type", "Dense"}, {"units", 10}, {"activation", "softmax"}});
  nlohmann::json spec = {{"name", "bench_mlp"}, {"input_shape", {64}}, {"layers", layers}};

  fmt::print("digits MLP {} training, Adam, batch {}, {} steps per repetition, median of 5\n", arch, batch, steps);
  fmt::print("{:>8} {:>16} {:>18} {:>8}\n", "threads", "tensorctl (s/s)", "reference (s/s)", "ratio");
  set_flush_denormals(true);
  for (int t : threads) {
    ModelOptions o;
    o.inter_op_threads = t;
    o.intra_op_threads = t;
    o.seed = 1;
    Model model(std::make_shared<Sequential>(Sequential::from_json(spec, "bench", "", 1)), o);
    ReferenceMlp ref(sizes, batch);
    std::vector<double> ours, theirs;
    for (int rep = 0; rep < 6; ++rep) {
      auto start = std::chrono::steady_clock::now();
      for (int s = 0; s < steps; ++s) {
        std::size_t k = static_cast<std::size_t>(s) % xs.size();
        model.train_step(xs[k], ys[k], s);
      }
      double a = seconds_since(start);
      start = std::chrono::steady_clock::now();
      for (int s = 0; s < steps; ++s) {
        std::size_t k = static_cast<std::size_t>(s) % xs.size();
        ref.step(xs[k].data<float>(), ys[k].data<std::int32_t>());
      }
      double b = seconds_since(start);
      if (rep == 0) continue;  // warm-up
      ours.push_back(steps * batch / a);
      theirs.push_back(steps * batch / b);
    }
    fmt::print("{:>8} {:>16.0f} {:>18.0f} {:>8.2f}\n", t, median(ours), median(theirs), median(ours) / median(theirs));
  }
  fmt::print("(reference: hand-written single-threaded loop on OpenBLAS sgemm in this process)\n");
  return 0;
}
