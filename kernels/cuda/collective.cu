// CUDA kernels of AllReduce and FlatSlice (definitions in core/ops/collective.cpp) over NCCL, and the
// CudaDevice members that join a collective (core/collective.h's join_collective_on). Multi-worker training
// on GPUs: one rank per GPU, mpirun starts them, MPI carries NCCL's unique id from rank 0 to the others once,
// and every gradient bucket is then summed by ncclAllReduce on the device's stream, never leaving the GPUs.
//
// The sum's bits: each member's gradients are weighted on the device first (float(weight * x), as the CPU's
// collectives do), then NCCL sums them in its own order (a ring's or a tree's). With one rank that is
// float(weight * x), the CPU path's bits; with more, the ranks still agree with each other, NCCL giving every
// rank the same result, but not with the CPU's member order to the last bit.
//
// A stalled rank must not hang the others (docs/data-parallel.md): each ncclAllReduce is watched from the host
// (CudaDevice::nccl_all_reduce), and one not done within the collective's timeout aborts the communicator.
#include <charconv>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "core/collective.h"
#include "core/graph.h"
#include "core/op_registry.h"
#include "kernels/cuda/cuda_util.h"
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
  const std::string what = "all-reduce of " + ctx.node().name + " at step " + std::to_string(ctx.step());
  const std::int64_t group = ctx.attrs().i("group");
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
  if (at > 0) device.nccl_all_reduce(group, y, static_cast<std::size_t>(at), what);
  // The summary's all-reduce counts (Collective::stats); the seconds are the GPU's, which the host does not wait.
  if (const std::shared_ptr<Collective> c = Collective::find(group))
    c->record_device_call(static_cast<int>(ctx.attrs().i("member")), at);
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

namespace {

// "60", "0.2": the shortest text that reads back as the same double, as the CPU collectives say a timeout.
std::string seconds_text(double s) {
  char buf[32];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, s).ptr);
}

std::chrono::steady_clock::time_point deadline_after(double seconds) {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
}

// Waits until the non-blocking communicator's last call has finished on the host (ncclInProgress no more),
// polling its state: ncclSuccess, its error, or ncclInProgress still at `deadline`.
ncclResult_t settle(ncclComm_t comm, ncclResult_t status, std::chrono::steady_clock::time_point deadline) {
  while (status == ncclInProgress) {
    if (std::chrono::steady_clock::now() >= deadline) return ncclInProgress;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (const ncclResult_t asked = ncclCommGetAsyncError(comm, &status); asked != ncclSuccess) return asked;
  }
  return status;
}

}  // namespace

// The communicator is non-blocking (NCCL's config.blocking = 0), so neither making it nor queueing an
// all-reduce can hold the host past the collective's timeout: NCCL connects the ranks lazily, at the first
// all-reduce (since 2.22), and a rank gone by then would leave the others waiting inside that call.
void CudaDevice::join_collective(const std::shared_ptr<Collective>& collective, int member, std::uint64_t key) {
  {
    std::lock_guard lock(nccl_mu_);
    if (nccl_comms_.count(collective->id()) != 0 || nccl_aborted_.count(collective->id()) != 0) return;
  }
  const int members = collective->members();
  const double seconds = collective->timeout().count();
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
  // Made without nccl_mu_ held: an abort of another group's communicator (the watchdog) never waits for it.
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const std::string rank = "NCCL's communicator for rank " + std::to_string(member) + " of " + std::to_string(members);
  ncclResult_t status = ncclCommInitRankConfig(&comm, members, id, member, &config);
  if (comm != nullptr) status = settle(comm, status, deadline_after(seconds));
  if (status != ncclSuccess) {
    if (comm != nullptr) ncclCommAbort(comm);
    throw RuntimeError(name_ + ": " + rank + ": " +
                       (status == ncclInProgress ? "the other ranks did not join within " + seconds_text(seconds) + " s"
                                                 : nccl_error(status)));
  }
  std::lock_guard lock(nccl_mu_);
  nccl_comms_[collective->id()] = comm;
  nccl_timeouts_[collective->id()] = seconds;
}

bool CudaDevice::has_nccl_comm(std::int64_t group) const {
  std::lock_guard lock(nccl_mu_);
  // An aborted group's all-reduces stay here, and fail: on the CPU they would not meet the other ranks'.
  return nccl_comms_.count(group) != 0 || nccl_aborted_.count(group) != 0;
}

void CudaDevice::nccl_all_reduce(std::int64_t group, float* y, std::size_t n, const std::string& what) {
  std::lock_guard lock(nccl_mu_);
  const auto it = nccl_comms_.find(group);
  if (it == nccl_comms_.end())
    throw RuntimeError(what + ": " + name_ + " holds no NCCL communicator for group " + std::to_string(group) +
                       (nccl_aborted_.count(group) != 0 ? " (aborted after a stalled all-reduce)" : " (never joined)"));
  const double seconds = nccl_timeouts_.at(group);
  const auto deadline = deadline_after(seconds);
  // Queued on a non-blocking communicator: the call returns at once, or says it is still setting up (the
  // first all-reduce connects the ranks), which is waited for here against the timeout.
  const ncclResult_t status =
      settle(it->second, ncclAllReduce(y, y, n, ncclFloat, ncclSum, it->second, stream()), deadline);
  if (status != ncclSuccess) {
    const std::string why = status == ncclInProgress
                                ? "the other ranks did not take part within " + seconds_text(seconds) + " s (NCCL)"
                                : nccl_error(status);
    ncclCommAbort(it->second);
    nccl_comms_.erase(it);
    nccl_aborted_.insert(group);
    throw RuntimeError(what + " on " + name_ + ": " + why);
  }
  cudaEvent_t done = nullptr;
  check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), name_, "cudaEventCreate");
  if (const cudaError_t recorded = cudaEventRecord(done, stream()); recorded != cudaSuccess) {
    cudaEventDestroy(done);
    check(recorded, name_, "cudaEventRecord");
  }
  std::lock_guard watch(watch_mu_);
  watched_.push_back({done, deadline, group, what});
  if (!watchdog_.joinable()) watchdog_ = std::thread([this] { watch_nccl(); });
  watch_cv_.notify_all();
}

// Polls the watched all-reduces every few milliseconds while any is queued (NCCL's kernels give the host no
// other sign): a done one is dropped, one past its deadline aborts its communicator. Events need no current
// device to be queried or destroyed, and ncclCommAbort makes its own device current.
void CudaDevice::watch_nccl() {
  constexpr auto kPoll = std::chrono::milliseconds(5);
  std::unique_lock lock(watch_mu_);
  while (!watch_stop_) {
    if (watched_.empty()) {
      watch_cv_.wait(lock, [this] { return watch_stop_ || !watched_.empty(); });
      continue;
    }
    watch_cv_.wait_for(lock, kPoll);
    const auto now = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < watched_.size();) {
      const cudaError_t status = cudaEventQuery(watched_[i].done);
      if (status == cudaErrorNotReady && now < watched_[i].deadline) {
        ++i;
        continue;
      }
      if (status != cudaErrorNotReady && status != cudaSuccess) cudaGetLastError();  // the next wait reports it
      const WatchedAllReduce w = std::move(watched_[i]);
      watched_.erase(watched_.begin() + static_cast<std::ptrdiff_t>(i));
      if (status == cudaErrorNotReady) {
        // Other threads only append meanwhile, so index i stays the next to look at.
        lock.unlock();  // abort_nccl takes nccl_mu_, which a thread queueing an all-reduce holds before watch_mu_
        abort_nccl(w);
        lock.lock();
      }
      cudaEventDestroy(w.done);  // released once done, if it is not yet
    }
  }
}

void CudaDevice::abort_nccl(const WatchedAllReduce& stalled) noexcept {
  std::lock_guard lock(nccl_mu_);
  const auto it = nccl_comms_.find(stalled.group);
  if (it == nccl_comms_.end()) return;  // aborted already, for an earlier all-reduce of the group
  try {
    std::lock_guard error(error_mu_);
    if (!host_error_)
      host_error_ = std::make_exception_ptr(RuntimeError(
          stalled.what + " on " + name_ + ": the other ranks did not finish it within " +
          seconds_text(nccl_timeouts_.at(stalled.group)) +
          " s (NCCL); its communicator is aborted (a stalled or failed rank: see the other ranks' messages)"));
  } catch (...) {
    // No memory for the message: the abort below still ends the wait, and the next all-reduce says why.
  }
  ncclCommAbort(it->second);  // its queued kernels end, so the waits on the stream return
  nccl_comms_.erase(it);
  nccl_aborted_.insert(stalled.group);
}

TCTL_REGISTER_KERNELS("cuda", {"AllReduce", all_reduce_cuda}, {"FlatSlice", flat_slice_cuda});

}  // namespace tctl::cuda
