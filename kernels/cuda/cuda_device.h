// A CUDA GPU as a tensorctl Device, `cuda:N`: device memory from a caching pool (no cudaMalloc in steady
// state; a freed block is handed out again once the work queued before its release is done), one stream
// on which kernels, copies and host work run in order (and, while race-check's threads hold them, a stream
// per such thread beside it: own_stream), and copies staged through pinned host memory.
// Plain device memory only (no managed memory): the host never touches a cuda buffer through a pointer.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "core/caching_pool.h"
#include "core/device.h"
#include "core/errors.h"
#include "core/thread_pool.h"

namespace tctl::cuda {

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int ordinal);
  ~CudaDevice() override;

  DeviceKind kind() const override { return kind_; }
  const std::string& name() const override { return name_; }
  bool host_addressable() const override { return false; }
  void* allocate(std::size_t bytes) override;
  void deallocate(void* p, std::size_t bytes) override;
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override;
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override;
  void copy_on_device(void* dst, const void* src, std::size_t bytes) override;
  // Host work runs on the stream through cudaLaunchHostFunc; it must not call CUDA itself.
  void enqueue(std::function<void()> work) override;
  void synchronize() override;
  std::shared_ptr<Event> record_event() override;
  // cudaEventElapsedTime times it: microsecond resolution, on the GPU's clock.
  std::shared_ptr<Event> record_timed_event() override;
  void make_current() override;
  DeviceMemoryStats memory_stats() const override { return pool_.stats(); }
  std::vector<std::pair<std::string, std::string>> properties() const override;

  // Narrowed for AllReduce (a collective joined here) and FusedUpdate (only with TCTL_CUDA_FUSED_UPDATES=1).
  bool supports(const Node& node) const override;
  // NCCL (kernels/cuda/collective.cu): an AllReduce runs here only for a collective this device joined, one
  // replica per process (multi_worker), each on its own GPU; the communicator is made from a unique id that
  // rank 0 draws and the collective carries to the others.
  std::string collective_refusal(const Collective& collective) const override;
  void join_collective(const std::shared_ptr<Collective>& collective, int member, std::uint64_t key) override;
  // Whether a communicator was joined for the collective with id `group` (and not aborted since).
  bool has_nccl_comm(std::int64_t group) const;
  // Queues ncclAllReduce of y[0, n) in place, summed over the group's members, on the calling thread's stream,
  // and watches it: an all-reduce not done within the collective's timeout (the other ranks stalled or gone)
  // aborts the communicator, whose kernels then end, and the device's next wait throws RuntimeError("<what>
  // on cuda:0: the other ranks did not finish it within 60 s (NCCL); ..."), as the CPU's collectives fail
  // rather than hang. Throws RuntimeError when NCCL refuses the call or no communicator was joined.
  void nccl_all_reduce(std::int64_t group, float* y, std::size_t n, const std::string& what);

  // CUDA graphs (kernels/cuda/recording.cpp): the calling thread's work is captured on a stream of the
  // recording's own, so another thread's copies to the device's stream (the fit loop's producer) stay out of
  // it; the replay launches the graph on the device's stream. Blocks freed while recording are kept until
  // the replay goes, copies from the host are taken from pinned copies of their bytes made then, and each
  // launch queues the reports its kernels made (enqueue_report) anew. Only with TCTL_CUDA_GRAPHS=1 until
  // the GPU check has compared replays with eager runs.
  std::unique_ptr<Recording> begin_recording() override;
  bool can_record() const override;
  // While the calling thread records here, the recording's step word in device memory, which each launch of
  // its graph sets to the run's step (Replay::launch): a kernel whose random key changes every step reads it
  // (launch.h's StepKey). Null otherwise.
  const std::int64_t* recording_step_word();

  // A copy stream (Device::copy_stream): only with TCTL_CUDA_COPY_STREAM=1 until the GPU check has run it.
  // The thread's copies from the host go to it through the pinned staging ring, as the device's do.
  std::unique_ptr<CopyStream> copy_stream() override;

  std::unique_ptr<OwnStream> own_stream() override;
  bool has_own_streams() const override { return own_streams_.load(std::memory_order_acquire) > 0; }
  void queue_wait(const Event& event) override;

  int ordinal() const { return ordinal_; }
  // The GPU's streaming multiprocessors (132 on an H100), for kernels that size their grid by the machine.
  int multiprocessors() const { return multiprocessors_; }
  // Where the calling thread's work goes: its own stream of this device while it holds one, else the
  // device's stream.
  cudaStream_t stream() const;
  // The device's stream, whatever the calling thread holds.
  cudaStream_t main_stream() const { return stream_; }
  // The device's cuBLAS handle, bound to its stream, made on first use: FP32 math without TF32 (exact
  // float products, as on the CPU) and a fixed workspace, so a product gives the same bits every run.
  cublasHandle_t cublas();
  // Held across each call on that handle (launch.h's CublasCall).
  std::mutex& cublas_mutex() { return cublas_mu_; }
  // Points the handle at `stream` (the calling thread's), keeping its workspace; under cublas_mutex().
  void bind_cublas_to(cudaStream_t stream);
  // Recorded after each call on the handle while own streams exist, and waited for before the next: the
  // handle's one workspace must not serve two streams' products at once.
  cudaEvent_t cublas_done() const { return cublas_done_; }
  // Rethrows the first error of host work queued with enqueue, or of a report read, once.
  void rethrow_host_error();
  // Queues a copy of `bytes` (at most kReportBytes) of device memory into a slot of a pinned ring; `report`
  // reads that copy on the host at the next wait that covers it (synchronize, an event's wait, a copy to the
  // host), which rethrows what it throws. So a result computed on the device (an update's numeric guard, a
  // bad label) reaches host code without holding up the stream: a host function on the stream, as before,
  // stalled it at every update (bench/compare_pytorch_gpu.sh, mlp_digits_b32; figures in bench/README.md).
  // On a thread's own stream the copy is waited for and `report` runs at once instead, throwing from here.
  // `report` must not call CUDA.
  static constexpr std::size_t kReportBytes = 8;
  void enqueue_report(const void* src, std::size_t bytes, std::function<void(const void* host)> report);
  // The number of reports queued so far: take it before queueing a wait, then pass it to read_reports
  // once the wait is over, to run the reports whose copies the wait covered. Lock-free.
  std::uint64_t report_mark() const;
  void read_reports(std::uint64_t mark);

 private:
  struct HostWork {
    CudaDevice* device;
    std::function<void()> work;
  };
  static void CUDART_CB run_host_work(void* data);
  static void CUDART_CB run_kept_host_work(void* data);  // a recording's: the replay keeps it
  void run(HostWork& w);
  class Own;
  class Copies;
  class Capture;  // kernels/cuda/recording.h
  class GraphReplay;
  struct Kept;
  static thread_local Capture* t_capture_;  // the calling thread's recording, on whichever device
  // The calling thread's recording on this device, or null.
  Capture* capturing() const;
  // Queues `report` to read the word at `host` once a wait covers the copy queued into it before; under
  // report_mu_.
  void add_report_locked(const void* host, std::function<void(const void* host)> report);
  // Whether a report queued before `mark` is still unread.
  bool report_unread(std::uint64_t mark);
  // Copies between the host and the device through the pinned staging buffers, a chunk at a time.
  void stage_from_host(char* dst, const char* src, std::size_t bytes, cudaStream_t stream);
  void stage_to_host(char* dst, const char* src, std::size_t bytes);
  // memcpy between pageable and staging memory, split over copy_pool_ when the chunk is large: one core
  // copies several times slower than the link carries from pinned memory, a large share of a step that
  // moves a large batch (bench_cuda_limits' copy lines; mlp2048_b1024 in bench/compare_pytorch_gpu.sh).
  void host_copy(char* dst, const char* src, std::size_t bytes);

  int ordinal_;
  // Looked up once: kind() is asked for each node the executor runs.
  const DeviceKind kind_ = device_kind("cuda");
  std::string name_;
  int multiprocessors_ = 1;
  cudaStream_t stream_ = nullptr;
  // Captures under way (recording.cpp), and the blocks the pool gave back meanwhile, freed at the last one's
  // end. Declared before pool_, whose destructor frees through them.
  std::mutex capture_mu_;
  int captures_ TCTL_GUARDED_BY(capture_mu_) = 0;
  std::vector<void*> deferred_frees_ TCTL_GUARDED_BY(capture_mu_);
  CachingPool pool_;
  // A ring of pinned buffers, taken in turn by every copy's chunks, so that filling one overlaps the
  // transfers of those before it; each one's event marks the end of the last transfer that read or wrote
  // it, and is waited for before the buffer is used again (on whichever stream that transfer was). Eight,
  // so that a batch of a few MB moved by the fit loop's producer thread (models/train/trainer.cpp) while a
  // step runs does not wait, holding staging_mu_, for its own first chunk's transfer queued behind the
  // step's kernels (a batch over 8 MiB still does, at its ninth chunk). Chunks of 1 MiB: a large batch's copy
  // takes less stream time than in 4 MiB chunks (both filled by four threads), though a single transfer of
  // 4 MiB, alone, is faster (mlp2048_b1024 in bench/compare_pytorch_gpu.sh; figures in bench/README.md).
  static constexpr std::size_t kStagingBytes = std::size_t{1} << 20;
  static constexpr std::size_t kStagingBuffers = 8;
  // The next buffer of the ring, once its last transfer is done; under staging_mu_.
  std::size_t take_staging();
  // Helpers for host_copy: a quarter of the hardware threads, at most 4 (none on a machine of 2-7 threads).
  std::once_flag copy_pool_once_;
  std::unique_ptr<ThreadPool> copy_pool_;
  std::mutex staging_mu_;
  std::array<void*, kStagingBuffers> staging_{};
  std::array<cudaEvent_t, kStagingBuffers> staging_done_{};
  std::size_t next_staging_ = 0;
  std::once_flag cublas_once_;
  cublasHandle_t cublas_ = nullptr;
  cudaEvent_t cublas_done_ = nullptr;
  static constexpr std::size_t kCublasWorkspace = std::size_t{32} << 20;
  cudaStream_t cublas_stream_ = nullptr;  // the stream the handle is bound to; under cublas_mu_
  void* cublas_workspace_ = nullptr;
  std::mutex error_mu_;
  std::exception_ptr host_error_;
  std::mutex cublas_mu_;
  // enqueue_report's ring of pinned slots and the reports not yet read, oldest first (the report with index
  // i reads slot i % kReportSlots; a full ring is read after a wait for the stream before a slot is reused).
  struct PendingReport {
    std::uint64_t index;
    const void* host;  // the ring's slot, or a word a replay keeps
    std::function<void(const void* host)> report;
  };
  static constexpr std::size_t kReportSlots = 1024;
  void read_reports_locked(std::uint64_t mark);
  std::mutex report_mu_;
  void* report_ring_ = nullptr;
  std::deque<PendingReport> reports_;
  // Written under report_mu_; read without it by report_mark, which every event's creation calls.
  std::atomic<std::uint64_t> reports_queued_{0};
  // The NCCL communicators joined (non-blocking ones), by collective id, and their collectives' timeouts; they
  // live as long as the process, as the library does, unless a stalled all-reduce aborts one. An all-reduce is
  // queued under nccl_mu_ (never longer than the timeout), and a communicator aborted under it, so no thread
  // queues on one being aborted.
  mutable std::mutex nccl_mu_;
  std::map<std::int64_t, ncclComm_t> nccl_comms_ TCTL_GUARDED_BY(nccl_mu_);
  std::map<std::int64_t, double> nccl_timeouts_ TCTL_GUARDED_BY(nccl_mu_);
  std::set<std::int64_t> nccl_aborted_ TCTL_GUARDED_BY(nccl_mu_);  // groups whose communicator was aborted
  // The all-reduces queued and not yet seen done, each with an event after it; the watchdog thread (started
  // with the first) polls them, and aborts the communicator of one past its deadline (kernels/cuda/collective.cu).
  struct WatchedAllReduce {
    cudaEvent_t done;
    std::chrono::steady_clock::time_point deadline;
    std::int64_t group;
    std::string what;
  };
  void watch_nccl();
  void abort_nccl(const WatchedAllReduce& stalled) noexcept;
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  std::vector<WatchedAllReduce> watched_ TCTL_GUARDED_BY(watch_mu_);
  bool watch_stop_ TCTL_GUARDED_BY(watch_mu_) = false;
  std::thread watchdog_;  // started under watch_mu_, joined by the destructor
  // The own streams threads hold now (Device::own_stream), and how many.
  mutable std::mutex own_mu_;
  std::vector<cudaStream_t> own_ TCTL_GUARDED_BY(own_mu_);
  std::atomic<int> own_streams_{0};
};

}  // namespace tctl::cuda
