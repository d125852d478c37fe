// The sgemm limit of an MLP training step (see bench/gemm_limit.h) on 1 and 2 OpenBLAS threads. Printed per
// MLP: GEMM time per step, GFLOP/s reached, and the samples/s limit.
//
// Usage: bench_sgemm_limit   (run by bench/limits.sh)
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/gemm_limit.h"

namespace {

struct Mlp {
  std::string name;
  std::vector<int> widths;  // input, hidden..., output
  int batch;
};

}  // namespace

int main() {
  const std::vector<Mlp> mlps{{"MLP 64-128-64-10, batch 32", {64, 128, 64, 10}, 32},
                              {"MLP 64-128-64-10, batch 256", {64, 128, 64, 10}, 256},
                              {"MLP 784-512-512-10, batch 128", {784, 512, 512, 10}, 128}};
  fmt::print("{:<32} {:>8} {:>14} {:>10} {:>16}\n", "sgemm limit of a training step", "threads", "GEMM us/step",
             "GFLOP/s", "limit samples/s");
  for (const Mlp& mlp : mlps) {
    for (int threads : {1, 2}) {
      const auto [seconds, flops] = tctl::bench::mlp_gemm_step(mlp.widths, mlp.batch, threads, 7);
      fmt::print("{:<32} {:>8} {:>14.2f} {:>10.1f} {:>16.0f}\n", mlp.name, threads, seconds * 1e6,
                 flops / seconds / 1e9, mlp.batch / seconds);
    }
  }
  return 0;
}
