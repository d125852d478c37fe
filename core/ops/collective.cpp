// AllReduce: member `member` of the collective `group` (core/collective.h) contributes its gradients
// x_0..x_{k-1} (float32, any shapes) with a float scalar weight, the last input; every member's output is
// one vector of all their elements, packed in input order, each the sum over members m, in member order, of
// weight_m * x_m. Packing a bucket of small gradients into one exchange is what Horovod calls tensor fusion:
// one meeting per bucket instead of one per tensor. FlatSlice takes a gradient back out of the packed vector.
// Attrs (ints): group (the group's id), member, instance (which all-reduce of a step this is; with the step
// it keys the collective). Not differentiable: both are inserted after the gradients.
//
// Ordering: members are matched by instance, not by the order they issue in, so every all-reduce of a step
// needs its own instance, the same on every member. The kernel blocks its inter-op thread until every
// member has issued the same (step, instance). Issued in the same order on every member (chained by
// control edges, or fused into one all-reduce), they cannot deadlock. In different orders they still
// meet as long as each member's executor can run its other all-reduces meanwhile, on other inter-op
// threads; with one inter-op thread, a member waiting in instance 0 for a member waiting in instance 1 for
// it never meets it, and after the group's timeout both runs throw RuntimeError instead of hanging.
// Because a waiting kernel holds an inter-op thread, members should not share one inter-op pool, and the
// members of a group must not be nodes of one Session::run: each member is its own run on its own thread.
#include "core/ops/ops.h"

#include "core/collective.h"
#include "core/op_registry.h"

namespace tctl {
namespace {

TensorSpec all_reduce_infer(const InferContext& c) {
  const int k = c.num_inputs() - 1;
  if (k < 1) c.fail("needs at least one value and the weight");
  std::int64_t total = 0;
  for (int i = 0; i < k; ++i) {
    c.expect_dtype(i, DType::kF32);
    if (!c.shape(i).fully_known()) c.fail("input " + std::to_string(i) + " has an unknown dimension");
    total += c.shape(i).num_elements();
  }
  c.expect_dtype(k, DType::kF32);
  c.expect_rank(k, 0);
  for (const char* name : {"group", "member", "instance"})
    if (!c.attrs().has(name)) c.fail(std::string("needs the int attribute ") + name);
  if (c.attrs().i("group") < 1) c.fail("group must be a group's id (1 or more)");
  if (c.attrs().i("member") < 0) c.fail("member must be non-negative");
  const std::int64_t instance = c.attrs().i("instance");
  if (instance < 0 || instance >= kMaxCollectiveInstances)
    c.fail("instance must be in [0, " + std::to_string(kMaxCollectiveInstances) + "), got " + std::to_string(instance));
  return {DType::kF32, Shape{total}};
}

// FlatSlice: elements [begin, begin + product(shape)) of a vector, as a tensor of `shape`.
TensorSpec flat_slice_infer(const InferContext& c) {
  c.expect_dtype(0, DType::kF32);
  c.expect_rank(0, 1);
  const auto& dims = c.attrs().ints("shape");
  if (static_cast<int>(dims.size()) > Shape::kMaxRank) c.fail("shape has too many dimensions");
  const Shape shape{std::span<const std::int64_t>(dims)};
  if (!shape.fully_known()) c.fail("shape must be fully known");
  const std::int64_t begin = c.attrs().i("begin");
  const std::int64_t n = c.shape(0)[0];
  if (begin < 0 || (n >= 0 && begin + shape.num_elements() > n))
    c.fail("elements [" + std::to_string(begin) + ", " + std::to_string(begin + shape.num_elements()) +
           ") are not inside a vector of " + std::to_string(n));
  return {DType::kF32, shape};
}

}  // namespace

void define_collective_ops() {
  // An all-reduce waits for the other members: like any node of unknown cost it runs only once its thread
  // has nothing cheap left to run, and then others ready with it go to the pool.
  register_op(
      {.name = "AllReduce", .num_inputs = -1, .infer = all_reduce_infer, .cost = unknown_cost, .collective = true});
  register_op({.name = "FlatSlice", .infer = flat_slice_infer});
}

}  // namespace tctl
