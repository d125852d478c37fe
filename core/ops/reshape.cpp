// Reshape: the same elements seen with another shape, keeping the batch dimension; used by the Flatten
// and Reshape layers. Attribute "shape": the dimensions after the batch, all known. The output may share
// the input's buffer.
#include "core/ops/ops.h"

#include "core/autodiff.h"

namespace tctl {
namespace {

TensorSpec reshape_infer(const InferContext& c) {
  const Shape& x = c.shape(0);
  if (x.rank() < 1) c.fail("input must have a batch dimension");
  const auto& dims = c.attrs().ints("shape");
  if (static_cast<int>(dims.size()) + 1 > Shape::kMaxRank) c.fail("target shape has too many dimensions");
  const Shape target{std::span<const std::int64_t>(dims)};
  const Shape rest = x.without_batch();
  if (rest.fully_known() && rest.num_elements() != target.num_elements())
    c.fail("cannot reshape " + x.to_string() + " to " + Shape::concat(x[0], target).to_string() + ": " +
           std::to_string(rest.num_elements()) + " elements per example, not " + std::to_string(target.num_elements()));
  return {c.input(0).dtype, Shape::concat(x[0], target)};
}

std::vector<Output> reshape_grad(GradBuilder& g) {
  const Shape rest = g.spec(g.x(0)).shape.without_batch();
  const std::vector<std::int64_t> dims(rest.dims().begin(), rest.dims().end());
  return {g.op("Reshape", {g.dy()}, Attrs{{"shape", dims}})};
}

}  // namespace

void define_reshape_ops() {
  register_op({.name = "Reshape", .infer = reshape_infer, .grad = reshape_grad, .aliases_output = true});
}

}  // namespace tctl
