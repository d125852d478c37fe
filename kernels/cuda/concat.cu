// CUDA kernels of the concatenation along the last axis and its gradient, Concat, SliceLastAxis and
// PadLastAxis (definitions in core/ops/concat.cpp), and of Reshape (core/ops/reshape.cpp). All copy bytes,
// so every result is bit-identical to the CPU's. Each is a copy of a block of columns from every row of one
// matrix into another, one thread per element copied; Reshape copies nothing: it publishes the input's
// buffer with the new shape, as on the CPU.
#include "core/op_registry.h"
#include "kernels/cuda/device_math.cuh"

namespace tctl::cuda {
namespace {

std::int64_t last_dim(const Shape& s) { return s[s.rank() - 1]; }

// Where a block of columns lies in a row-major matrix: its row stride and its first column, in elements.
struct Columns {
  std::int64_t ld;
  std::int64_t first;
};

__global__ void copy_columns_kernel(const float* src, Columns from, float* dst, Columns to, std::int64_t rows,
                                    std::int64_t cols) {
  TCTL_GRID_STRIDE_LOOP(i, rows * cols) {
    const std::int64_t r = i / cols, j = i % cols;
    dst[r * to.ld + to.first + j] = src[r * from.ld + from.first + j];
  }
}

// dst[r, to.first + j] = src[r, from.first + j] for r < rows, j < cols.
void copy_columns(KernelContext& ctx, const float* src, Columns from, float* dst, Columns to, std::int64_t rows,
                  std::int64_t cols) {
  launch_elements(ctx, rows * cols, copy_columns_kernel, src, from, dst, to, rows, cols);
}

void concat_cuda(KernelContext& ctx) {
  Tensor& y = ctx.output();
  const std::int64_t width = last_dim(y.shape());
  const std::int64_t rows = width == 0 ? 0 : y.num_elements() / width;
  float* dst = out<float>(ctx);
  std::int64_t offset = 0;
  for (int k = 0; k < ctx.num_inputs(); ++k) {
    const std::int64_t w = last_dim(ctx.input(k).shape());
    copy_columns(ctx, in<float>(ctx, k), Columns{w, 0}, dst, Columns{width, offset}, rows, w);
    offset += w;
  }
}

void slice_last_axis_cuda(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::int64_t begin = ctx.attrs().i("begin"), size = ctx.attrs().i("size");
  const std::int64_t width = last_dim(x.shape());
  const std::int64_t rows = width == 0 ? 0 : x.num_elements() / width;
  copy_columns(ctx, in<float>(ctx, 0), Columns{width, begin}, out<float>(ctx), Columns{size, 0}, rows, size);
}

// Zeros first, then the input's columns over them: two passes where the CPU writes each row once, but the
// same bytes.
void pad_last_axis_cuda(KernelContext& ctx) {
  const std::int64_t begin = ctx.attrs().i("begin"), width = ctx.attrs().i("width");
  const std::int64_t size = last_dim(ctx.input(0).shape());
  Tensor& y = ctx.output();
  const std::int64_t rows = width == 0 ? 0 : y.num_elements() / width;
  if (y.bytes() > 0) cudaMemsetAsync(y.raw_mutable_data(), 0, y.bytes(), stream_of(ctx));
  check_launch(ctx);  // also reports a failed cudaMemsetAsync
  copy_columns(ctx, in<float>(ctx, 0), Columns{size, 0}, out<float>(ctx), Columns{width, begin}, rows, size);
}

// Shares the input's buffer: a tensor never changes, so no copy is needed (the op may alias its output).
void reshape_cuda(KernelContext& ctx) { ctx.set_output(ctx.input(0).reshaped(ctx.output_spec().shape)); }

}  // namespace

TCTL_REGISTER_KERNELS("cuda", {"Concat", concat_cuda}, {"SliceLastAxis", slice_last_axis_cuda},
                      {"PadLastAxis", pad_last_axis_cuda}, {"Reshape", reshape_cuda});

}  // namespace tctl::cuda
