// Concatenation along the last axis, and its gradient: Concat (variadic), SliceLastAxis (attrs begin,
// size) and PadLastAxis (attrs begin, width), the slice's own gradient. The last axis of every Concat input
// must be known when the graph is traced, since the gradient's slice offsets are fixed attributes.
#include <cstring>

#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {
namespace {

std::int64_t last_dim(const Shape& s) { return s[s.rank() - 1]; }

TensorSpec concat_infer(const InferContext& c) {
  if (c.num_inputs() < 1) c.fail("Concat needs at least one input");
  const Shape& first = c.shape(0);
  if (first.rank() < 1) c.fail("Concat inputs must have at least one dimension, input 0 is a scalar");
  std::int64_t total = 0;
  Shape out = first;
  for (int i = 0; i < c.num_inputs(); ++i) {
    const Shape& s = c.shape(i);
    if (c.input(i).dtype != DType::kF32) c.fail("input " + std::to_string(i) + " is not float32");
    if (s.rank() != first.rank())
      c.fail("input " + std::to_string(i) + " has shape " + s.to_string() + " but input 0 has " + first.to_string());
    for (int d = 0; d + 1 < s.rank(); ++d) {
      if (s[d] >= 0 && out[d] >= 0 && s[d] != out[d])
        c.fail("input " + std::to_string(i) + " has shape " + s.to_string() + " but input 0 has " + first.to_string() +
               "; all dimensions but the last must match");
      if (out[d] < 0) out.set_dim(d, s[d]);
    }
    if (last_dim(s) < 0) c.fail("input " + std::to_string(i) + " has an unknown last dimension " + s.to_string());
    total += last_dim(s);
  }
  out.set_dim(out.rank() - 1, total);
  return {DType::kF32, out};
}

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
      ctx.parallel_for(rows, std::max<std::int64_t>(1, kElementwiseGrain / w), [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t r = begin; r < end; ++r)
          std::memcpy(out + r * width + offset, in + r * w, static_cast<std::size_t>(w) * sizeof(float));
      });
    offset += w;
  }
}

TensorSpec slice_last_axis_infer(const InferContext& c) {
  const Shape& s = c.shape(0);
  if (s.rank() < 1) c.fail("SliceLastAxis needs an input of at least one dimension");
  const std::int64_t begin = c.attrs().i("begin"), size = c.attrs().i("size");
  if (begin < 0 || size < 0) c.fail("begin and size must be non-negative");
  if (last_dim(s) >= 0 && begin + size > last_dim(s))
    c.fail("slice [" + std::to_string(begin) + ", " + std::to_string(begin + size) + ") is outside input " + s.to_string());
  Shape out = s;
  out.set_dim(s.rank() - 1, size);
  return {c.input(0).dtype, out};
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

TensorSpec pad_last_axis_infer(const InferContext& c) {
  const Shape& s = c.shape(0);
  if (s.rank() < 1) c.fail("PadLastAxis needs an input of at least one dimension");
  const std::int64_t begin = c.attrs().i("begin"), width = c.attrs().i("width");
  if (begin < 0 || last_dim(s) < 0 || begin + last_dim(s) > width)
    c.fail("input " + s.to_string() + " at offset " + std::to_string(begin) + " does not fit width " + std::to_string(width));
  Shape out = s;
  out.set_dim(s.rank() - 1, width);
  return {c.input(0).dtype, out};
}

void pad_last_axis_cpu(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::int64_t begin = ctx.attrs().i("begin"), width = ctx.attrs().i("width");
  const std::int64_t size = last_dim(x.shape());
  const std::int64_t rows = size == 0 ? ctx.output().num_elements() / std::max<std::int64_t>(width, 1) : x.num_elements() / size;
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

TCTL_REGISTER_OP({.name = "Concat",
                  .num_inputs = -1,
                  .infer = concat_infer,
                  .grad = [](GradBuilder& g) {
                    const auto& inputs = g.graph().node(g.y()).inputs;
                    std::vector<Output> out;
                    std::int64_t offset = 0;
                    for (std::size_t i = 0; i < inputs.size(); ++i) {
                      const Shape& s = g.spec(g.x(static_cast<int>(i))).shape;
                      const std::int64_t w = s[s.rank() - 1];
                      out.push_back(g.op("SliceLastAxis", {g.dy()}, Attrs{{"begin", offset}, {"size", w}}));
                      offset += w;
                    }
                    return out;
                  },
                  .cpu = concat_cpu});
TCTL_REGISTER_OP({.name = "SliceLastAxis",
                  .infer = slice_last_axis_infer,
                  .grad = [](GradBuilder& g) {
                    const Shape& s = g.spec(g.x(0)).shape;
                    return std::vector<Output>{g.op("PadLastAxis", {g.dy()},
                                                    Attrs{{"begin", g.attrs().i("begin")}, {"width", s[s.rank() - 1]}})};
                  },
                  .cpu = slice_last_axis_cpu});
TCTL_REGISTER_OP({.name = "PadLastAxis",
                  .infer = pad_last_axis_infer,
                  .grad = [](GradBuilder& g) {
                    const Shape& s = g.spec(g.x(0)).shape;
                    return std::vector<Output>{g.op("SliceLastAxis", {g.dy()},
                                                    Attrs{{"begin", g.attrs().i("begin")}, {"size", s[s.rank() - 1]}})};
                  },
                  .cpu = pad_last_axis_cpu});

}  // namespace tctl::cpu
