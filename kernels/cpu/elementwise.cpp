// CPU kernels of the elementwise arithmetic: Add, Sub, Mul, Scale, AddN, ZerosLike, and the bias add of a
// dense layer with its gradient (definitions in core/ops/elementwise.cpp).
#include <cstring>

#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {
namespace {

template <class Op>
void binary_cpu(KernelContext& ctx, Op op) {
  const float* a = ctx.input(0).data<float>();
  const float* b = ctx.input(1).data<float>();
  float* y = ctx.output().mutable_data<float>();
  for_each_element(ctx, ctx.output().num_elements(), [&](std::int64_t i) { y[i] = op(a[i], b[i]); });
}

void add_cpu(KernelContext& ctx) {
  binary_cpu(ctx, [](float a, float b) { return a + b; });
}
void sub_cpu(KernelContext& ctx) {
  binary_cpu(ctx, [](float a, float b) { return a - b; });
}
void mul_cpu(KernelContext& ctx) {
  binary_cpu(ctx, [](float a, float b) { return a * b; });
}

void scale_cpu(KernelContext& ctx) {
  const float factor = static_cast<float>(ctx.attrs().f("factor"));
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output().mutable_data<float>();
  for_each_element(ctx, ctx.output().num_elements(), [&](std::int64_t i) { y[i] = x[i] * factor; });
}

// Summed left to right in input order, the order autodiff produced them in: a fixed order. Each block adds
// one input at a time over all its elements, through pointers taken once: the same sums as element by
// element, in vector adds (per element, reaching each input through the context kept the loop scalar: 2 % of
// bench_workloads transformer_text_b32's step).
void add_n_cpu(KernelContext& ctx) {
  float* y = ctx.output().mutable_data<float>();
  const int n = ctx.num_inputs();
  std::vector<const float*> in(static_cast<std::size_t>(n));
  for (int k = 0; k < n; ++k) in[static_cast<std::size_t>(k)] = ctx.input(k).data<float>();
  ctx.parallel_for(ctx.output().num_elements(), kElementwiseGrain, [&](std::int64_t begin, std::int64_t end) {
    float* __restrict out = y;
    if (n == 1) {
      std::copy(in[0] + begin, in[0] + end, out + begin);
      return;
    }
    const float* __restrict a = in[0];
    const float* __restrict b = in[1];
    for (std::int64_t i = begin; i < end; ++i) out[i] = a[i] + b[i];
    for (int k = 2; k < n; ++k) {
      const float* __restrict c = in[static_cast<std::size_t>(k)];
      for (std::int64_t i = begin; i < end; ++i) out[i] += c[i];
    }
  });
}

void zeros_like_cpu(KernelContext& ctx) {
  Tensor& y = ctx.output();
  std::memset(y.mutable_data<char>(), 0, y.bytes());
}

void bias_add_cpu(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const float* b = ctx.input(1).data<float>();
  const std::int64_t f = ctx.input(1).num_elements();
  const std::int64_t rows = x.num_elements() / f;
  const float* px = x.data<float>();
  float* y = ctx.output().mutable_data<float>();
  ctx.parallel_for(rows, std::max<std::int64_t>(1, kElementwiseGrain / f), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r)
      for (std::int64_t j = 0; j < f; ++j) y[r * f + j] = px[r * f + j] + b[j];
  });
}

// Column sums, each over rows in order; the split is over columns, so no sum is ever cut.
void bias_add_grad_cpu(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  Tensor& db = ctx.output();
  const std::int64_t f = db.num_elements();
  const std::int64_t rows = dy.num_elements() / f;
  const float* p = dy.data<float>();
  float* out = db.mutable_data<float>();
  // Columns go kColumns at a time into local sums that stay in registers through all the rows (summing
  // into `out` itself stored and reloaded every row: the compiler cannot rule out that out aliases dy).
  // Each column still adds its rows first to last, so the bits match a plain loop's.
  constexpr std::int64_t kColumns = 64;
  ctx.parallel_for(f, std::max<std::int64_t>(1, kElementwiseGrain / std::max<std::int64_t>(rows, 1)),
                   [&](std::int64_t begin, std::int64_t end) {
                     for (std::int64_t j0 = begin; j0 < end; j0 += kColumns) {
                       const std::int64_t cols = std::min(kColumns, end - j0);
                       float sum[kColumns] = {};
                       if (cols == kColumns) {
                         // A whole block, in vectors: with a count the compiler knows, the adds are
                         // kColumns / kLanes vector ones per row (scalar ones took 2 % of
                         // bench_workloads transformer_text_b32's step).
                         Floats acc[kColumns / kLanes] = {};
                         for (std::int64_t r = 0; r < rows; ++r)
                           for (std::int64_t v = 0; v < kColumns / kLanes; ++v)
                             acc[v] += load(p + r * f + j0 + v * kLanes);
                         for (std::int64_t v = 0; v < kColumns / kLanes; ++v) store(sum + v * kLanes, acc[v]);
                       } else {
                         for (std::int64_t r = 0; r < rows; ++r) {
                           const float* row = p + r * f + j0;
                           for (std::int64_t j = 0; j < cols; ++j) sum[j] += row[j];
                         }
                       }
                       std::copy(sum, sum + cols, out + j0);
                     }
                   });
}

}  // namespace

TCTL_REGISTER_KERNELS("cpu", {"Add", add_cpu}, {"Sub", sub_cpu}, {"Mul", mul_cpu}, {"Scale", scale_cpu},
                      {"AddN", add_n_cpu}, {"ZerosLike", zeros_like_cpu}, {"BiasAdd", bias_add_cpu},
                      {"BiasAddGrad", bias_add_grad_cpu});

}  // namespace tctl::cpu
