// CPU kernels of the concatenation along the last axis and its gradient: Concat (variadic), SliceLastAxis
// (attrs begin, size) and PadLastAxis (attrs begin, width) (definitions in core/ops/concat.cpp).
#include <cstring>

#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {
namespace {

std::int64_t last_dim(const Shape& s) { return s[s.rank() - 1]; }

void concat_cpu(KernelContext& ctx) {
  Tensor& y = ctx.output();
  const std::int64_t width = last_dim(y.shape());
  const std::int64_t rows = width == 0 ? 0 : y.num_elements() / width;
  float* out = y.mutable_data<float>();
  std::int64_t offset = 0;
  for (int k = 0; k < ctx.num_inputs(); ++k) {
    const Tensor& x = ctx.input(k);
    const std::int64_t w = last_dim(x.shape());
    const float* in = x.data<float>();
    if (w > 0)
      ctx.parallel_for(
          rows, std::max<std::int64_t>(1, kElementwiseGrain / w), [&](std::int64_t begin, std::int64_t end) {
            for (std::int64_t r = begin; r < end; ++r)
              std::memcpy(out + r * width + offset, in + r * w, static_cast<std::size_t>(w) * sizeof(float));
          });
    offset += w;
  }
}

void slice_last_axis_cpu(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::int64_t begin = ctx.attrs().i("begin"), size = ctx.attrs().i("size");
  const std::int64_t width = last_dim(x.shape());
  const std::int64_t rows = width == 0 ? 0 : x.num_elements() / width;
  const float* in = x.data<float>();
  float* out = ctx.output().mutable_data<float>();
  if (size == 0) return;
  ctx.parallel_for(rows, std::max<std::int64_t>(1, kElementwiseGrain / size), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r)
      std::memcpy(out + r * size, in + r * width + begin, static_cast<std::size_t>(size) * sizeof(float));
  });
}

void pad_last_axis_cpu(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::int64_t begin = ctx.attrs().i("begin"), width = ctx.attrs().i("width");
  const std::int64_t size = last_dim(x.shape());
  const std::int64_t rows =
      size == 0 ? ctx.output().num_elements() / std::max<std::int64_t>(width, 1) : x.num_elements() / size;
  const float* in = x.data<float>();
  float* out = ctx.output().mutable_data<float>();
  if (width == 0) return;
  ctx.parallel_for(rows, std::max<std::int64_t>(1, kElementwiseGrain / width), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) {
      float* row = out + r * width;
      std::fill(row, row + width, 0.0f);
      if (size > 0) std::memcpy(row + begin, in + r * size, static_cast<std::size_t>(size) * sizeof(float));
    }
  });
}

}  // namespace

TCTL_REGISTER_KERNELS("cpu", {"Concat", concat_cpu}, {"SliceLastAxis", slice_last_axis_cpu},
                      {"PadLastAxis", pad_last_axis_cpu});

}  // namespace tctl::cpu
