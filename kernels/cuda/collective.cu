// CUDA kernels of AllReduce and FlatSlice (definitions in core/ops/collective.cpp) over NCCL, and the
// CudaDevice members that join a collective (core/collective.h's join_collective_on). Multi-worker training
// on GPUs: one rank per GPU, mpirun starts them, MPI carries NCCL's unique id from rank 0 to the others once,
// and every gradient bucket is then summed by ncclAllReduce on the device's stream, never leaving the GPUs.
//
// The sum's bits: each member's gradients are weighted on the device first (float(weight * x), as the CPU's
// collectives do), then NCCL sums them in its own order (a ring's or a tree's). With one rank that is
// float(weight * x), the CPU path's bits; with more, the ranks still agree with each other, NCCL giving every
// rank the same result, but not with the CPU's member order to the last bit.
#include <cstring>
#include <string>

#include "core/collective.h"
#include "core/graph.h"
#include "core/op_registry.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/nccl_loader.h"

namespace tctl::cuda {
namespace {

__global__ void weigh(const float* x, const float* weight, float* y, std::int64_t n) {
  const float w = *weight;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    y[i] = __fmul_rn(w, x[i]);
}

std::string nccl_error(ncclResult_t status) { return ncclGetErrorString(status); }

void all_reduce_cuda(KernelContext& ctx) {
  CudaDevice& device = device_of(ctx);
  const std::string what = ctx.node().name + " at step " + std::to_string(ctx.step());
  const ncclComm_t comm = device.nccl_comm(ctx.attrs().i("group"));
  if (comm == nullptr)
    throw RuntimeError("all-reduce of " + what + ": " + device.name() + " joined no NCCL communicator for group " +
                       std::to_string(ctx.attrs().i("group")));
  const int k = ctx.num_inputs() - 1;
  const float* weight = in<float>(ctx, k);
  float* y = out<float>(ctx);
  std::int64_t at = 0;
  for (int i = 0; i < k; ++i) {
    const std::int64_t n = ctx.input(i).num_elements();
    if (n > 0) weigh<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(in<float>(ctx, i), weight, y + at, n);
    at += n;
  }
  check_launch(ctx);
  if (at == 0) return;
  const ncclResult_t status =
      ncclAllReduce(y, y, static_cast<std::size_t>(at), ncclFloat, ncclSum, comm, stream_of(ctx));
  if (status != ncclSuccess)
    throw RuntimeError("all-reduce of " + what + " on " + device.name() + ": " + nccl_error(status));
}

void flat_slice_cuda(KernelContext& ctx) {
  Tensor& y = ctx.output();
  if (y.num_elements() == 0) return;
  const cudaError_t status = cudaMemcpyAsync(out<float>(ctx), in<float>(ctx, 0) + ctx.attrs().i("begin"), y.bytes(),
                                             cudaMemcpyDeviceToDevice, stream_of(ctx));
  if (status != cudaSuccess)
    throw RuntimeError(ctx.node().name + " (FlatSlice) on " + ctx.device().name() + ": " + cudaGetErrorString(status));
}

}  // namespace

std::string CudaDevice::collective_refusal(const Collective& collective) const {
  if (std::string why = nccl_missing(); !why.empty()) return why;
  // NCCL takes one GPU per member; the replicas of one process are traced one after another, and could not
  // meet to make a communicator (mirrored across GPUs is left to a later round).
  if (collective.members() > 1 && !collective.members_are_processes())
    return "NCCL joins one replica per process (multi_worker under mpirun); the replicas of one process "
           "all-reduce on the CPU";
  return "";
}

void CudaDevice::join_collective(const std::shared_ptr<Collective>& collective, int member, std::uint64_t key) {
  std::lock_guard lock(nccl_mu_);
  if (nccl_comms_.count(collective->id()) != 0) return;
  const int members = collective->members();
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (member == 0) {
    if (const ncclResult_t status = ncclGetUniqueId(&id); status != ncclSuccess)
      throw RuntimeError(name_ + ": NCCL's unique id: " + nccl_error(status));
  }
  if (members > 1) {
    // Rank 0's bytes, each a float (exact), to every rank: rank 0 weighs 1, the others 0.
    float carried[sizeof id.internal];
    for (std::size_t i = 0; i < sizeof id.internal; ++i)
      carried[i] = static_cast<float>(static_cast<unsigned char>(id.internal[i]));
    collective->all_reduce(member, key, carried, static_cast<std::int64_t>(sizeof id.internal),
                           member == 0 ? 1.0f : 0.0f, carried, "NCCL's unique id");
    for (std::size_t i = 0; i < sizeof id.internal; ++i)
      id.internal[i] = static_cast<char>(static_cast<unsigned char>(carried[i]));
  }
  make_current();
  ncclComm_t comm = nullptr;
  if (const ncclResult_t status = ncclCommInitRank(&comm, members, id, member); status != ncclSuccess)
    throw RuntimeError(name_ + ": NCCL's communicator for rank " + std::to_string(member) + " of " +
                       std::to_string(members) + ": " + nccl_error(status));
  nccl_comms_[collective->id()] = comm;
}

ncclComm_t CudaDevice::nccl_comm(std::int64_t group) const {
  std::lock_guard lock(nccl_mu_);
  const auto it = nccl_comms_.find(group);
  return it == nccl_comms_.end() ? nullptr : it->second;
}

TCTL_REGISTER_KERNELS("cuda", {"AllReduce", all_reduce_cuda}, {"FlatSlice", flat_slice_cuda});

}  // namespace tctl::cuda
