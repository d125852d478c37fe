// The sgemm limit of an MLP training step (see bench/gemm_limit.h) on 1 and 2 OpenBLAS threads. Printed per
// MLP: GEMM time per step, GFLOP/s reached, and the samples/s limit.
//
// `--conv-32x32x3 T` instead prints, one JSON line per convolution of configs/models/cnn_32x32x3.json at
// batch 64, its products' milliseconds in OpenBLAS alone on T threads (bench/conv_gemm.sh compares them
// with tensorctl's convolution ops).
//
// `--fma-peak` prints one core's rate of float multiply-adds at the build's vector width (16 floats with
// AVX-512, 8 with AVX2), the ceiling of any product on that core (bench/README.md, "The AVX2 path on an
// AVX-512 machine").
//
// Usage: bench_sgemm_limit   (run by bench/limits.sh)
//        bench_sgemm_limit --conv-32x32x3 T
//        bench_sgemm_limit --fma-peak
#include <array>
#include <chrono>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/gemm_limit.h"
#include "kernels/cpu/vector_math.h"

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

// Twelve independent chains of fused multiply-adds: enough to keep two FMA units of four cycles' latency
// busy. GFLOP/s counted as 2 per lane per multiply-add; the best of 5 runs of 2^25 rounds.
int fma_peak() {
  using tctl::cpu::Floats;
  constexpr int kChains = 12;
  constexpr long kRounds = 1L << 25;
  double best = 0;
  float sink = 0;
  for (int run = 0; run < 5; ++run) {
    std::array<Floats, kChains> acc;
    for (int c = 0; c < kChains; ++c) acc[c] = tctl::cpu::splat(1.0f + static_cast<float>(c) * 1e-7f);
    const Floats a = tctl::cpu::splat(0.9999999f), b = tctl::cpu::splat(1e-8f);
    const auto t0 = std::chrono::steady_clock::now();
    for (long r = 0; r < kRounds; ++r) {
#pragma GCC unroll 12
      for (int c = 0; c < kChains; ++c) acc[c] = tctl::cpu::multiply_add(acc[c], a, b);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (int c = 0; c < kChains; ++c) sink += acc[c][0];
    best = std::max(best, 2.0 * tctl::cpu::kLanes * kChains * static_cast<double>(kRounds) / seconds / 1e9);
  }
  fmt::print(R"({{"fma_peak_gflops": {:.1f}, "lanes": {}, "sink": {:.3f}}})"
             "\n",
             best, tctl::cpu::kLanes, sink);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--fma-peak") return fma_peak();
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
