// The sgemm limit of an MLP training step (see bench/gemm_limit.h) on 1 and 2 OpenBLAS threads. Printed per
// MLP: GEMM time per step, GFLOP/s reached, and the samples/s limit.
//
// `--conv-32x32x3 T` instead prints, one JSON line per convolution of configs/models/cnn_32x32x3.json at
// batch 64, its products' milliseconds in OpenBLAS alone on T threads (bench/conv_gemm.sh compares them
// with tensorctl's convolution ops).
//
// Usage: bench_sgemm_limit   (run by bench/limits.sh)
//        bench_sgemm_limit --conv-32x32x3 T
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

int conv_32x32x3(int threads) {
  const int batch = 64;
  struct Layer {
    const char* name;
    tctl::bench::ConvGemms gemms;
  };
  const std::vector<Layer> layers{{"conv2d", {batch * 32 * 32, 27, 32, true}},
                                  {"conv2d_1", {batch * 32 * 32, 288, 32, false}},
                                  {"conv2d_2", {batch * 16 * 16, 288, 64, false}},
                                  {"conv2d_3", {batch * 16 * 16, 576, 64, false}}};
  for (const Layer& l : layers) {
    const auto s = tctl::bench::conv_gemm_step(l.gemms, threads, 5);
    fmt::print(
        R"({{"layer": "{}", "threads": {}, "forward_ms": {:.3f}, "kernel_grad_ms": {:.3f}, "input_grad_ms": {:.3f}}})"
        "\n",
        l.name, threads, s.forward * 1e3, s.kernel_grad * 1e3, s.input_grad * 1e3);
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--conv-32x32x3") return conv_32x32x3(std::stoi(argv[2]));
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
