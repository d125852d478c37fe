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
// `--transformer-tiles` prints, one JSON line per product of a transformer_text_b32 encoder block
// (bench_workloads), its milliseconds on one thread cut into matmul.cpp's 512 x 512 tiles, each tile by sgemm
// and by small_product's in-place kernels whatever small_product_work() says (product_by_parts), operands
// cold: the figures behind the bound of the in-place tiles on this processor (bench/README.md, "Which tiles
// run in place on the AVX2 path").
//
// Usage: bench_sgemm_limit   (run by bench/limits.sh)
//        bench_sgemm_limit --conv-32x32x3 T
//        bench_sgemm_limit --fma-peak
//        bench_sgemm_limit --transformer-tiles
#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include <cblas.h>
#include <fmt/format.h>

#include "bench/gemm_limit.h"
#include "kernels/cpu/small_product.h"
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

namespace {

struct TileCase {
  const char* name;
  bool ta, tb;
  int m, n, k;
};

int transformer_tiles() {
  // One encoder block at batch 32, sequence 128, width 128, feedforward 512: forward products (NN), input
  // gradients (NT) and weight gradients (TN, the 4096 tokens deep).
  const std::vector<TileCase> cases{
      {"qkv", false, false, 4096, 384, 128},        {"attention_out", false, false, 4096, 128, 128},
      {"ff_in", false, false, 4096, 512, 128},      {"ff_out", false, false, 4096, 128, 512},
      {"d_ff_hidden", false, true, 4096, 512, 128}, {"d_ff_in", false, true, 4096, 128, 512},
      {"d_heads", false, true, 4096, 128, 128},     {"d_qkv_in", false, true, 4096, 128, 384},
      {"dW_ff_in", true, false, 128, 512, 4096},    {"dW_ff_out", true, false, 512, 128, 4096},
      {"dW_out", true, false, 128, 128, 4096},      {"dW_qkv", true, false, 128, 384, 4096}};
  constexpr int kSets = 8, kTile = 512;  // eight sets of operands in turn (tens of MB): each call reads from memory
  openblas_set_num_threads(1);
  for (const TileCase& c : cases) {
    std::vector<std::vector<float>> a(kSets), b(kSets), y(kSets);
    for (int s = 0; s < kSets; ++s) {
      a[s].assign(static_cast<std::size_t>(c.m) * c.k, 0.5f);
      b[s].assign(static_cast<std::size_t>(c.k) * c.n, 0.25f);
      y[s].assign(static_cast<std::size_t>(c.m) * c.n, 0.0f);
    }
    const int lda = c.ta ? c.m : c.k, ldb = c.tb ? c.k : c.n;
    std::array<double, 2> best{1e30, 1e30};
    for (int run = 0; run < 6; ++run)
      for (int in_place = 0; in_place < 2; ++in_place) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int s = 0; s < kSets; ++s)
          for (int row = 0; row < c.m; row += kTile)
            for (int col = 0; col < c.n; col += kTile) {
              const int rows = std::min(kTile, c.m - row), cols = std::min(kTile, c.n - col);
              const float* at = c.ta ? a[s].data() + row : a[s].data() + static_cast<std::ptrdiff_t>(row) * lda;
              const float* bt = c.tb ? b[s].data() + static_cast<std::ptrdiff_t>(col) * ldb : b[s].data() + col;
              float* yt = y[s].data() + static_cast<std::ptrdiff_t>(row) * c.n + col;
              if (in_place != 0)
                tctl::cpu::product_by_parts(c.ta, c.tb, rows, cols, c.k, at, lda, bt, ldb, yt, c.n);
              else
                cblas_sgemm(CblasRowMajor, c.ta ? CblasTrans : CblasNoTrans, c.tb ? CblasTrans : CblasNoTrans, rows,
                            cols, c.k, 1.0f, at, lda, bt, ldb, 0.0f, yt, c.n);
            }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / kSets;
        best[static_cast<std::size_t>(in_place)] = std::min(best[static_cast<std::size_t>(in_place)], seconds);
      }
    const double gflop = 2.0 * c.m * c.n * c.k / 1e9;
    fmt::print(
        R"({{"product": "{}", "op": "{}{}", "rows": {}, "cols": {}, "depth": {}, "sgemm_ms": {:.3f}, "in_place_ms": {:.3f}, "sgemm_gflops": {:.1f}, "in_place_gflops": {:.1f}}})"
        "\n",
        c.name, c.ta ? 'T' : 'N', c.tb ? 'T' : 'N', c.m, c.n, c.k, best[0] * 1e3, best[1] * 1e3, gflop / best[0],
        gflop / best[1]);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--fma-peak") return fma_peak();
  if (argc == 2 && std::string(argv[1]) == "--transformer-tiles") return transformer_tiles();
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
