// The CPU kernel of AllReduce (definition, attrs and the ordering members must keep in
// core/ops/collective.cpp): finds the group and meets the other members in CollectiveGroup::all_reduce,
// keyed by this run's step and the node's instance.
#include "core/collective.h"
#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {
namespace {

void all_reduce_cpu(KernelContext& ctx) {
  const Attrs& attrs = ctx.attrs();
  const std::string what = ctx.node().name + " at step " + std::to_string(ctx.step());
  // Held for the whole call, so the owner dropping the group meanwhile cannot pull it from under us.
  const std::shared_ptr<CollectiveGroup> group = CollectiveGroup::find(attrs.i("group"));
  if (group == nullptr)
    throw RuntimeError("all-reduce of " + what + ": collective group " + std::to_string(attrs.i("group")) +
                       " does not exist (never created, or dropped by its owner)");
  const std::int64_t member = attrs.i("member");
  if (member >= group->members())
    throw RuntimeError("all-reduce of " + what + ": member " + std::to_string(member) + " of a group of " +
                       std::to_string(group->members()));
  const Tensor& x = ctx.input(0);
  const float weight = ctx.input(1).data<float>()[0];
  Tensor& y = ctx.output();
  group->all_reduce(static_cast<int>(member), collective_key(ctx.step(), attrs.i("instance")), x.data<float>(),
                    x.num_elements(), weight, y.mutable_data<float>(), what);
}

}  // namespace

TCTL_REGISTER_KERNELS(DeviceKind::kCpu, {"AllReduce", all_reduce_cpu});

}  // namespace tctl::cpu
