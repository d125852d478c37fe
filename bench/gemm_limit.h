// The sgemm limit of an MLP training step: how long OpenBLAS alone takes for the step's matrix products.
// Per Dense layer that is the forward product and the weight gradient, plus the input gradient for every
// layer but the first. Nothing else of a step (bias, activations, loss, optimizer, scheduling) is counted,
// so no implementation can train faster than batch / that time. Used by bench_sgemm_limit, and by
// bench_workloads to measure the limit in the same process as the workload, alternating with it.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "bench/bench_util.h"

namespace tctl::bench {

// Seconds for one C[m,n] = op(A) op(B) (row-major), median of `runs` timings of about 0.2 GFLOP each; one
// more run before them warms the operands up.
inline double gemm_seconds(int m, int n, int k, bool ta, bool tb, int runs) {
  std::vector<float> a(static_cast<std::size_t>(m) * k, 0.5f), b(static_cast<std::size_t>(k) * n, 0.25f),
      c(static_cast<std::size_t>(m) * n);
  const int reps = std::max(1, static_cast<int>(2e8 / (2.0 * m * n * k)));
  std::vector<double> times;
  for (int t = 0; t <= runs; ++t) {
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r)
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f,
                  a.data(), ta ? m : k, b.data(), tb ? k : n, 0.0f, c.data(), n);
    if (t > 0) times.push_back(seconds_since(start) / reps);
  }
  return median(times);
}

struct GemmStep {
  double seconds = 0;  // GEMM time of one training step
  double flops = 0;    // its floating-point operations
};

// The GEMMs of one training step of an MLP with these layer widths (input, hidden..., output), run by
// OpenBLAS on `threads` of its own threads; OpenBLAS is left on one thread afterwards, as tensorctl sets it.
inline GemmStep mlp_gemm_step(const std::vector<int>& widths, int batch, int threads, int runs) {
  openblas_set_num_threads(threads);
  GemmStep s;
  for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
    const int in = widths[l], out = widths[l + 1];
    s.seconds += gemm_seconds(batch, out, in, false, false, runs);  // y = x W
    s.seconds += gemm_seconds(in, out, batch, true, false, runs);   // dW = x^T dy
    s.flops += 4.0 * batch * in * out;
    if (l > 0) {
      s.seconds += gemm_seconds(batch, in, out, false, true, runs);  // dx = dy W^T
      s.flops += 2.0 * batch * in * out;
    }
  }
  openblas_set_num_threads(1);
  return s;
}

// One convolution layer as im2col products: `pixels` output pixels over the batch, `taps` (kh * kw * C) and
// `filters`; `first` has no input gradient (nothing before it needs one).
struct ConvGemms {
  int pixels, taps, filters;
  bool first;
};

// Seconds of the layer's products in one training step, each at its whole shape: the forward product
// [pixels, taps] x [taps, filters], the kernel gradient [taps, pixels] x [pixels, filters] and the input
// gradient [pixels, filters] x [filters, taps], on `threads` OpenBLAS threads.
struct ConvGemmSeconds {
  double forward = 0, kernel_grad = 0, input_grad = 0;
};
inline ConvGemmSeconds conv_gemm_step(const ConvGemms& c, int threads, int runs) {
  openblas_set_num_threads(threads);
  ConvGemmSeconds s;
  s.forward = gemm_seconds(c.pixels, c.filters, c.taps, false, false, runs);
  s.kernel_grad = gemm_seconds(c.taps, c.filters, c.pixels, true, false, runs);
  if (!c.first) s.input_grad = gemm_seconds(c.pixels, c.taps, c.filters, false, true, runs);
  openblas_set_num_threads(1);
  return s;
}

}  // namespace tctl::bench
