// AllReduce: member `member` of the in-process collective group `group` (core/collective.h) contributes its
// x with a float scalar weight; every member's output is sum over members m, in member order, of
// weight_m * x_m. Attrs (ints): group (the group's id), member, instance (which all-reduce of a step this is;
// with the step it keys the collective). Not differentiable: it is inserted after the gradients.
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
  c.expect_dtype(0, DType::kF32);
  c.expect_dtype(1, DType::kF32);
  c.expect_rank(1, 0);
  for (const char* name : {"group", "member", "instance"})
    if (!c.attrs().has(name)) c.fail(std::string("needs the int attribute ") + name);
  if (c.attrs().i("group") < 1) c.fail("group must be a group's id (1 or more)");
  if (c.attrs().i("member") < 0) c.fail("member must be non-negative");
  const std::int64_t instance = c.attrs().i("instance");
  if (instance < 0 || instance >= kMaxCollectiveInstances)
    c.fail("instance must be in [0, " + std::to_string(kMaxCollectiveInstances) + "), got " + std::to_string(instance));
  return c.input(0);
}

}  // namespace

void define_collective_ops() { register_op({.name = "AllReduce", .num_inputs = 2, .infer = all_reduce_infer}); }

}  // namespace tctl
