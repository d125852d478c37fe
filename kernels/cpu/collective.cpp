// The CPU kernels of AllReduce and FlatSlice (definitions, attrs and the ordering members must keep in
// core/ops/collective.cpp). AllReduce packs its inputs into its output and meets the other members there,
// in the group's all_reduce, keyed by this run's step and the node's instance.
#include <cstring>

#include "core/collective.h"
#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {
namespace {

void all_reduce_cpu(KernelContext& ctx) {
  const Attrs& attrs = ctx.attrs();
  const std::string what = ctx.node().name + " at step " + std::to_string(ctx.step());
  // Held for the whole call, so the owner dropping the group meanwhile cannot pull it from under us.
  const std::shared_ptr<Collective> group = Collective::find(attrs.i("group"));
  if (group == nullptr)
    throw RuntimeError("all-reduce of " + what + ": collective group " + std::to_string(attrs.i("group")) +
                       " does not exist (never created, or dropped by its owner)");
  const std::int64_t member = attrs.i("member");
  if (member >= group->members())
    throw RuntimeError("all-reduce of " + what + ": member " + std::to_string(member) + " of a group of " +
                       std::to_string(group->members()));
  const int k = ctx.num_inputs() - 1;
  const float weight = ctx.input(k).data<float>()[0];
  Tensor& y = ctx.output();
  float* out = y.mutable_data<float>();
  const float* in = out;
  if (k == 1) {
    in = ctx.input(0).data<float>();  // nothing to pack
  } else {
    std::int64_t at = 0;
    for (int i = 0; i < k; ++i) {
      const Tensor& x = ctx.input(i);
      if (x.num_elements() > 0) std::memcpy(out + at, x.data<float>(), x.bytes());
      at += x.num_elements();
    }
  }
  group->all_reduce(static_cast<int>(member), collective_key(ctx.step(), attrs.i("instance")), in, y.num_elements(),
                    weight, out, what);
}

void flat_slice_cpu(KernelContext& ctx) {
  Tensor& y = ctx.output();
  if (y.num_elements() > 0)
    std::memcpy(y.mutable_data<float>(), ctx.input(0).data<float>() + ctx.attrs().i("begin"), y.bytes());
}

}  // namespace

TCTL_REGISTER_KERNELS("cpu", {"AllReduce", all_reduce_cpu}, {"FlatSlice", flat_slice_cpu});

}  // namespace tctl::cpu
