// CPU kernels of EmbeddingMatMul and its gradients (definitions in core/ops/sequence.cpp): an embedding's
// rows times a kernel, the input projection of a recurrent layer that reads token ids. Each distinct id's row
// is multiplied once and its product copied to every place the id holds, and the gradients sum dy's rows per
// distinct id first, so the three products of the layer's input (forward, the table's and the kernel's
// gradients) run over the distinct ids instead of every id. On 12,800 random ids of 20,000 (bench_workloads
// lstm_text_b64) that is 9,460 rows instead of 12,800; a text's ids repeat far more. Every output element is
// computed by one thread in a fixed order, and the products are tiled by their shapes (matmul.h), so any
// thread count gives the same bits.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/matmul.h"

namespace tctl::cpu {
namespace {

enum class Scratch { kRows, kProducts, kCount };

// The distinct ids of a node's input, in the order they first appear: `rows` their table rows, and for
// each id the index of its row in `rows` (`slot`). The calling thread's, reused: no allocation per step.
struct DistinctIds {
  std::vector<std::int64_t> rows;
  std::vector<std::int64_t> slot;
};

const DistinctIds& distinct_ids(const KernelContext& ctx, const Tensor& ids, std::int64_t table_rows) {
  thread_local DistinctIds d;
  // Per table row, its index in d.rows or -1; left all -1 between calls.
  thread_local std::vector<std::int64_t> seen;
  const std::int64_t n = ids.num_elements();
  const float* pi = ids.data<float>();
  // Every id is checked, and every buffer sized, before any id is marked: nothing throws between the marks
  // and their reset, so `seen` is clean for the next call whatever this one meets.
  for (std::int64_t i = 0; i < n; ++i) table_row(ctx, pi[i], i, table_rows);
  if (seen.size() < static_cast<std::size_t>(table_rows)) seen.resize(static_cast<std::size_t>(table_rows), -1);
  d.rows.clear();
  d.rows.reserve(static_cast<std::size_t>(n));
  d.slot.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const auto row = static_cast<std::size_t>(pi[i]);
    if (seen[row] < 0) {
      seen[row] = static_cast<std::int64_t>(d.rows.size());
      d.rows.push_back(static_cast<std::int64_t>(row));
    }
    d.slot[static_cast<std::size_t>(i)] = seen[row];
  }
  for (const std::int64_t row : d.rows) seen[static_cast<std::size_t>(row)] = -1;
  return d;
}

std::int64_t distinct_count(const DistinctIds& d) { return static_cast<std::int64_t>(d.rows.size()); }

// The distinct ids' rows of the table, [distinct, width], in the calling thread's scratch.
const float* gather_rows(const KernelContext& ctx, const Tensor& table, const DistinctIds& d) {
  const std::int64_t width = table.shape()[1];
  const float* pt = table.data<float>();
  float* out = thread_scratch(distinct_count(d) * width, Scratch::kRows);
  for_each_row_of(ctx, distinct_count(d), width, [&](std::int64_t r) {
    std::copy_n(pt + d.rows[static_cast<std::size_t>(r)] * width, width, out + r * width);
  });
  return out;
}

void embedding_matmul_cpu(KernelContext& ctx) {
  const Tensor& table = ctx.input(0);
  const Tensor& w = ctx.input(2);
  const std::int64_t width = table.shape()[1], columns = w.shape()[1];
  const DistinctIds& d = distinct_ids(ctx, ctx.input(1), table.shape()[0]);
  const std::int64_t count = distinct_count(d);
  float* products = thread_scratch(count * columns, Scratch::kProducts);
  multiply(ctx, {.rows = count,
                 .cols = columns,
                 .depth = width,
                 .a = gather_rows(ctx, table, d),
                 .lda = width,
                 .b = w.data<float>(),
                 .ldb = columns,
                 .y = products});
  float* py = ctx.output().mutable_data<float>();
  for_each_row_of(ctx, static_cast<std::int64_t>(d.slot.size()), columns, [&](std::int64_t i) {
    std::copy_n(products + d.slot[static_cast<std::size_t>(i)] * columns, columns, py + i * columns);
  });
}

// Row s of the output is the sum, in id order, of dy's rows at the ids of distinct id s; rows past the
// distinct ids are zero. Column blocks, one per thread of the pool (multiples of 64 columns), each walk every
// id, copying at an id's first place (its slot is then the count of distinct ids before it) and adding at the
// others: every element is summed in id order whatever the blocks, and one thread reads dy once.
void embedding_row_sums_cpu(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const std::int64_t n = ctx.input(1).num_elements(), columns = dy.num_elements() / std::max<std::int64_t>(n, 1);
  const DistinctIds& d = distinct_ids(ctx, ctx.input(1), ctx.input(2).shape()[0]);
  const float* pdy = dy.data<float>();
  float* out = ctx.output().mutable_data<float>();
  constexpr std::int64_t kAlign = 64;
  const std::int64_t threads = std::max(1, ctx.intra().size());
  const std::int64_t block = (columns + threads * kAlign - 1) / (threads * kAlign) * kAlign;
  ctx.parallel_for((columns + block - 1) / block, 1, [&](std::int64_t b0, std::int64_t b1) {
    const std::int64_t c0 = b0 * block, c1 = std::min(columns, b1 * block);
    std::int64_t next = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t s = d.slot[static_cast<std::size_t>(i)];
      const float* src = pdy + i * columns;
      float* sum = out + s * columns;
      if (s == next) {
        std::copy(src + c0, src + c1, sum + c0);
        ++next;
      } else {
        for (std::int64_t c = c0; c < c1; ++c) sum[c] += src[c];
      }
    }
  });
  std::fill(out + distinct_count(d) * columns, out + n * columns, 0.0f);
}

// The table's gradient: zero but at the distinct ids, whose rows are their sums times W^T.
void embedding_matmul_table_grad_cpu(KernelContext& ctx) {
  const Tensor& sums = ctx.input(0);
  const Tensor& w = ctx.input(2);
  const std::int64_t rows = ctx.output_spec().shape[0], width = ctx.output_spec().shape[1], columns = w.shape()[1];
  const DistinctIds& d = distinct_ids(ctx, ctx.input(1), rows);
  const std::int64_t count = distinct_count(d);
  float* products = thread_scratch(count * width, Scratch::kProducts);
  multiply(ctx, {.tb = true,
                 .rows = count,
                 .cols = width,
                 .depth = columns,
                 .a = sums.data<float>(),
                 .lda = columns,
                 .b = w.data<float>(),
                 .ldb = columns,
                 .y = products});
  float* out = ctx.output().mutable_data<float>();
  for_each_row_of(ctx, rows, width, [&](std::int64_t r) { std::fill_n(out + r * width, width, 0.0f); });
  for_each_row_of(ctx, count, width, [&](std::int64_t s) {
    std::copy_n(products + s * width, width, out + d.rows[static_cast<std::size_t>(s)] * width);
  });
}

// The kernel's gradient: the distinct ids' rows, transposed, times their sums.
void embedding_matmul_kernel_grad_cpu(KernelContext& ctx) {
  const Tensor& sums = ctx.input(0);
  const Tensor& table = ctx.input(2);
  const std::int64_t width = table.shape()[1], columns = ctx.output_spec().shape[1];
  const DistinctIds& d = distinct_ids(ctx, ctx.input(1), table.shape()[0]);
  multiply(ctx, {.ta = true,
                 .rows = width,
                 .cols = columns,
                 .depth = distinct_count(d),
                 .a = gather_rows(ctx, table, d),
                 .lda = width,
                 .b = sums.data<float>(),
                 .ldb = columns,
                 .y = ctx.output().mutable_data<float>()});
}

}  // namespace

TCTL_REGISTER_KERNELS("cpu", {"EmbeddingMatMul", embedding_matmul_cpu}, {"EmbeddingRowSums", embedding_row_sums_cpu},
                      {"EmbeddingMatMulTableGrad", embedding_matmul_table_grad_cpu},
                      {"EmbeddingMatMulKernelGrad", embedding_matmul_kernel_grad_cpu});

}  // namespace tctl::cpu
