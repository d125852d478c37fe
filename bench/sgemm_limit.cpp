// The sgemm limit of an MLP training step: the time OpenBLAS alone needs for the step's matrix products
// (per Dense layer: the forward product, the weight gradient, and the input gradient for every layer but
// the first), at the batch given, on 1 and 2 OpenBLAS threads. Nothing else of a step (bias, activations,
// loss, optimizer, scheduling) is counted, so no implementation can train faster than batch / that time.
// Printed per MLP: GEMM time per step, GFLOP/s reached, and the samples/s limit.
//
// Usage: bench_sgemm_limit   (run by bench/limits.sh)
#include <cblas.h>

#include <chrono>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/bench_util.h"

namespace {

struct Mlp {
  std::string name;
  std::vector<int> widths;  // input, hidden..., output
  int batch;
};

// Seconds for one C[m,n] = A[m,k] B[k,n] (row-major, optional transposes), median of 7 runs of `reps`.
double gemm_seconds(int m, int n, int k, bool ta, bool tb) {
  std::vector<float> a(static_cast<std::size_t>(m) * k, 0.5f), b(static_cast<std::size_t>(k) * n, 0.25f),
      c(static_cast<std::size_t>(m) * n);
  const int reps = std::max(1, static_cast<int>(2e8 / (2.0 * m * n * k)));
  std::vector<double> times;
  for (int t = 0; t < 8; ++t) {
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r)
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a.data(),
                  ta ? m : k, b.data(), tb ? k : n, 0.0f, c.data(), n);
    if (t > 0) times.push_back(tctl::bench::seconds_since(start) / reps);
  }
  return tctl::bench::median(times);
}

}  // namespace

int main() {
  const std::vector<Mlp> mlps{{"MLP 64-128-64-10, batch 32", {64, 128, 64, 10}, 32},
                              {"MLP 64-128-64-10, batch 256", {64, 128, 64, 10}, 256},
                              {"MLP 784-512-512-10, batch 128", {784, 512, 512, 10}, 128}};
  fmt::print("{:<32} {:>8} {:>14} {:>10} {:>16}\n", "sgemm limit of a training step", "threads", "GEMM us/step",
             "GFLOP/s", "limit samples/s");
  for (const Mlp& mlp : mlps) {
    for (int threads : {1, 2}) {
      openblas_set_num_threads(threads);
      double seconds = 0, flops = 0;
      for (std::size_t l = 0; l + 1 < mlp.widths.size(); ++l) {
        const int in = mlp.widths[l], out = mlp.widths[l + 1], b = mlp.batch;
        seconds += gemm_seconds(b, out, in, false, false);  // y = x W
        seconds += gemm_seconds(in, out, b, true, false);   // dW = x^T dy
        flops += 4.0 * b * in * out;
        if (l > 0) {
          seconds += gemm_seconds(b, in, out, false, true);  // dx = dy W^T
          flops += 2.0 * b * in * out;
        }
      }
      fmt::print("{:<32} {:>8} {:>14.2f} {:>10.1f} {:>16.0f}\n", mlp.name, threads, seconds * 1e6, flops / seconds / 1e9,
                 mlp.batch / seconds);
    }
  }
  openblas_set_num_threads(1);
  return 0;
}
