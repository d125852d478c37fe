// Concatenation along the last axis, and its gradient: Concat (variadic), SliceLastAxis (attrs begin,
// size) and PadLastAxis (attrs begin, width), the slice's own gradient. The last axis of every Concat input
// must be known when the graph is traced, since the gradient's slice offsets are fixed attributes.
#include "core/ops/ops.h"

#include "core/autodiff.h"

namespace tctl {
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

TensorSpec slice_last_axis_infer(const InferContext& c) {
  const Shape& s = c.shape(0);
  if (s.rank() < 1) c.fail("SliceLastAxis needs an input of at least one dimension");
  const std::int64_t begin = c.attrs().i("begin"), size = c.attrs().i("size");
  if (begin < 0 || size < 0) c.fail("begin and size must be non-negative");
  if (last_dim(s) >= 0 && begin + size > last_dim(s))
    c.fail("slice [" + std::to_string(begin) + ", " + std::to_string(begin + size) + ") is outside input " +
           s.to_string());
  Shape out = s;
  out.set_dim(s.rank() - 1, size);
  return {c.input(0).dtype, out};
}

TensorSpec pad_last_axis_infer(const InferContext& c) {
  const Shape& s = c.shape(0);
  if (s.rank() < 1) c.fail("PadLastAxis needs an input of at least one dimension");
  const std::int64_t begin = c.attrs().i("begin"), width = c.attrs().i("width");
  if (begin < 0 || last_dim(s) < 0 || begin + last_dim(s) > width)
    c.fail("input " + s.to_string() + " at offset " + std::to_string(begin) + " does not fit width " +
           std::to_string(width));
  Shape out = s;
  out.set_dim(s.rank() - 1, width);
  return {c.input(0).dtype, out};
}

std::vector<Output> concat_grad(GradBuilder& g) {
  // A count, not a reference to the node: g.op adds nodes, which may move the graph's node vector.
  const std::size_t inputs = g.graph().node(g.y()).inputs.size();
  std::vector<Output> out;
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < inputs; ++i) {
    const std::int64_t w = last_dim(g.spec(g.x(static_cast<int>(i))).shape);
    out.push_back(g.op("SliceLastAxis", {g.dy()}, Attrs{{"begin", offset}, {"size", w}}));
    offset += w;
  }
  return out;
}

std::vector<Output> slice_last_axis_grad(GradBuilder& g) {
  const std::int64_t width = last_dim(g.spec(g.x(0)).shape);
  return {g.op("PadLastAxis", {g.dy()}, Attrs{{"begin", g.attrs().i("begin")}, {"width", width}})};
}

std::vector<Output> pad_last_axis_grad(GradBuilder& g) {
  const std::int64_t size = last_dim(g.spec(g.x(0)).shape);
  return {g.op("SliceLastAxis", {g.dy()}, Attrs{{"begin", g.attrs().i("begin")}, {"size", size}})};
}

}  // namespace

void define_concat_ops() {
  register_op({.name = "Concat", .num_inputs = -1, .infer = concat_infer, .grad = concat_grad});
  register_op({.name = "SliceLastAxis", .infer = slice_last_axis_infer, .grad = slice_last_axis_grad});
  register_op({.name = "PadLastAxis", .infer = pad_last_axis_infer, .grad = pad_last_axis_grad});
}

}  // namespace tctl
