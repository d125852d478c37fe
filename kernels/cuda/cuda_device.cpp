#include "kernels/cuda/cuda_device.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/graph.h"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/cudnn_conv.h"
#include "kernels/cuda/recording.h"

namespace tctl::cuda {

namespace {

// The own stream the calling thread holds (CudaDevice::own_stream), and of which device; a pinned word for
// the reports queued on it.
thread_local const CudaDevice* t_own_device = nullptr;
thread_local cudaStream_t t_own_stream = nullptr;
thread_local void* t_own_report = nullptr;
// The copy stream the calling thread holds (CudaDevice::copy_stream), and of which device.
thread_local const CudaDevice* t_copy_device = nullptr;
thread_local cudaStream_t t_copy_stream = nullptr;

class CudaEvent final : public Event {
 public:
  // A timed event costs a timestamp on the GPU; an untimed one (cudaEventDisableTiming) is the cheapest
  // kind, for every path but the profiler's. Recorded on `stream`, the calling thread's by default.
  CudaEvent(CudaDevice& device, bool timed, cudaStream_t stream = nullptr)
      : device_(device), timed_(timed), reports_before_(device.report_mark()) {
    CurrentDevice current(device.ordinal(), device.name());
    check(cudaEventCreateWithFlags(&event_, timed ? cudaEventDefault : cudaEventDisableTiming), device.name(),
          "cudaEventCreate");
    if (stream == nullptr) stream = device.stream();
    // The reports' ring is filled from the device's stream only: an event elsewhere does not cover it.
    covers_reports_ = stream == device.main_stream();
    check(cudaEventRecord(event_, stream), device.name(), "cudaEventRecord");
  }
  cudaEvent_t get() const { return event_; }
  ~CudaEvent() override { cudaEventDestroy(event_); }
  // A failed query counts as done: the failure itself is reported by the next wait or synchronize.
  bool done() const override { return cudaEventQuery(event_) != cudaErrorNotReady; }
  void wait() override {
    check(cudaEventSynchronize(event_), device_.name(), "cudaEventSynchronize");
    if (covers_reports_) device_.read_reports(reports_before_);
    device_.rethrow_host_error();
  }
  std::optional<double> elapsed_us_since(const Event& earlier) const override {
    const auto* from = dynamic_cast<const CudaEvent*>(&earlier);
    if (from == nullptr || &from->device_ != &device_ || !timed_ || !from->timed_) return std::nullopt;
    CurrentDevice current(device_.ordinal(), device_.name());
    float ms = 0;
    if (cudaEventElapsedTime(&ms, from->event_, event_) != cudaSuccess) {
      cudaGetLastError();  // not ready, or a failure the next synchronize reports: no time either way
      return std::nullopt;
    }
    return static_cast<double>(ms) * 1000.0;
  }

 private:
  CudaDevice& device_;
  bool timed_;
  std::uint64_t reports_before_;  // the reports queued before the event, whose copies its wait covers
  bool covers_reports_ = true;    // recorded on the device's stream, where those copies are queued
  cudaEvent_t event_ = nullptr;
};

// A point on every stream of a device at once (its own and the threads' own streams): done when each
// stream has passed it. What a freed block waits for while own streams exist.
class AllStreamsEvent final : public Event {
 public:
  explicit AllStreamsEvent(std::vector<std::shared_ptr<CudaEvent>> parts) : parts_(std::move(parts)) {}
  bool done() const override {
    return std::all_of(parts_.begin(), parts_.end(), [](const auto& e) { return e->done(); });
  }
  void wait() override {
    for (auto& e : parts_) e->wait();
  }

 private:
  std::vector<std::shared_ptr<CudaEvent>> parts_;
};

ProvidedDevices cuda_devices() {
  ProvidedDevices out;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    out.why_none = status == cudaErrorInsufficientDriver
                       ? "no CUDA driver, or one older than the CUDA runtime this tensorctl was built with"
                       : cudaGetErrorString(status);
    return out;
  }
  try {
    for (int i = 0; i < count; ++i) out.devices.push_back(std::make_unique<CudaDevice>(i));
  } catch (const RuntimeError& e) {
    out.devices.clear();
    out.why_none = e.what();
  }
  if (count == 0) out.why_none = "no CUDA-capable device is detected";
  return out;
}

[[maybe_unused]] const bool cuda_backend_registered =
    register_backend({.name = "cuda", .provider = cuda_devices, .graph_colour = "#d4efd4"});

}  // namespace

CudaDevice::CudaDevice(int ordinal)
    : ordinal_(ordinal),
      name_("cuda:" + std::to_string(ordinal)),
      pool_(
          name_,
          [this](std::size_t size) -> void* {
            CurrentDevice current(ordinal_, name_);
            void* p = nullptr;
            if (cudaMalloc(&p, size) != cudaSuccess) {
              cudaGetLastError();
              return nullptr;
            }
            return p;
          },
          [this](void* p) {
            // cudaFree waits for the device, which a capture under way on any thread may not survive: the
            // pool's trim (after a failed cudaMalloc) then leaves the block for the last capture's end.
            std::lock_guard lock(capture_mu_);
            if (captures_ > 0) return deferred_frees_.push_back(p);
            CurrentDevice current(ordinal_, name_);
            cudaFree(p);
          }) {
  CurrentDevice current(ordinal_, name_);
  check(cudaDeviceGetAttribute(&multiprocessors_, cudaDevAttrMultiProcessorCount, ordinal_), name_,
        "cudaDeviceGetAttribute");
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), name_, "cudaStreamCreate");
  for (std::size_t k = 0; k < staging_.size(); ++k) {
    check(cudaMallocHost(&staging_[k], kStagingBytes), name_, "cudaMallocHost");
    check(cudaEventCreateWithFlags(&staging_done_[k], cudaEventDisableTiming), name_, "cudaEventCreate");
  }
  check(cudaMallocHost(&report_ring_, kReportSlots * kReportBytes), name_, "cudaMallocHost");
}

CudaDevice::~CudaDevice() {
  {
    std::lock_guard lock(watch_mu_);
    watch_stop_ = true;
  }
  watch_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  CurrentDevice current(ordinal_, name_);
  cudaStreamSynchronize(stream_);
  {
    std::lock_guard lock(watch_mu_);
    for (const WatchedAllReduce& w : watched_) cudaEventDestroy(w.done);
  }
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (cublas_done_ != nullptr) cudaEventDestroy(cublas_done_);
  if (cublas_workspace_ != nullptr) cudaFree(cublas_workspace_);
  for (std::size_t k = 0; k < staging_.size(); ++k) {
    cudaFreeHost(staging_[k]);
    cudaEventDestroy(staging_done_[k]);
  }
  cudaFreeHost(report_ring_);
  cudaStreamDestroy(stream_);
}

void* CudaDevice::allocate(std::size_t bytes) { return pool_.allocate(bytes); }

// Every use of device memory is ordered on the one stream, and the host never touches it but through that
// stream, so a block given back may be handed out again at once: whatever reads it next is queued after
// whatever read it last. While threads hold own streams, the block waits until every stream has passed
// this point, for its last reader may be on any of them.
void CudaDevice::deallocate(void* p, std::size_t bytes) {
  if (Capture* c = capturing()) return c->keep(p, bytes);  // a replay may write it: the replay gives it back
  if (!has_own_streams()) {
    pool_.deallocate(p, done_event());
    return;
  }
  std::shared_ptr<Event> released;
  try {
    // Under own_mu_, so no stream in the list is destroyed before its event is recorded.
    std::lock_guard lock(own_mu_);
    std::vector<std::shared_ptr<CudaEvent>> parts{std::make_shared<CudaEvent>(*this, false, stream_)};
    for (cudaStream_t s : own_) parts.push_back(std::make_shared<CudaEvent>(*this, false, s));
    released = std::make_shared<AllStreamsEvent>(std::move(parts));
  } catch (...) {
    // A buffer's release cannot throw. Without the events, the block is free once the whole device is
    // idle (a failed device reports its failure at its next wait).
    cudaDeviceSynchronize();
    released = done_event();
  }
  pool_.deallocate(p, std::move(released));
}

cudaStream_t CudaDevice::stream() const {
  if (const Capture* c = capturing()) return c->stream();
  return t_own_device == this ? t_own_stream : stream_;
}

// A thread's own stream: registered (so freed blocks wait for it), then the device's stream drained (so a
// block freed there before, with no event, is free on every stream); on destruction its work finishes
// before it goes, and cuBLAS forgets it.
class CudaDevice::Own final : public OwnStream {
 public:
  explicit Own(CudaDevice& device) : device_(device) {
    TCTL_CHECK(t_own_device == nullptr, "a thread holds one own stream at a time");
    CurrentDevice current(device.ordinal_, device.name_);
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), device.name_, "cudaStreamCreate");
    bool registered = false;
    try {
      check(cudaMallocHost(&report_, CudaDevice::kReportBytes), device.name_, "cudaMallocHost");
      // Registered first, drained after: a block freed on the device's stream before this point carried
      // no event, and the drain sees its last reader done.
      register_stream(true);
      registered = true;
      check(cudaStreamSynchronize(device.stream_), device.name_, "cudaStreamSynchronize");
    } catch (...) {
      if (registered) register_stream(false);
      release();
      throw;
    }
    t_own_device = &device;
    t_own_stream = stream_;
    t_own_report = report_;
  }
  ~Own() override {
    CurrentDevice current(device_.ordinal_, device_.name_);
    cudaStreamSynchronize(stream_);
    t_own_device = nullptr;
    t_own_stream = nullptr;
    t_own_report = nullptr;
    register_stream(false);
    {
      // A stream made later at the same address must not pass for this one.
      std::lock_guard lock(device_.cublas_mu_);
      if (device_.cublas_stream_ == stream_) device_.cublas_stream_ = nullptr;
    }
    release();
  }
  Own(const Own&) = delete;
  Own& operator=(const Own&) = delete;

 private:
  void register_stream(bool add) {
    std::lock_guard lock(device_.own_mu_);
    if (add) {
      device_.own_.push_back(stream_);
      device_.own_streams_.fetch_add(1, std::memory_order_acq_rel);
    } else {
      device_.own_.erase(std::find(device_.own_.begin(), device_.own_.end(), stream_));
      device_.own_streams_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
  void release() {
    cudaStreamDestroy(stream_);
    if (report_ != nullptr) cudaFreeHost(report_);
  }

  CudaDevice& device_;
  cudaStream_t stream_ = nullptr;
  void* report_ = nullptr;
};

// The producer's stream for batches: its copies wait for the device's stream only when asked
// (wait_for_device), so a batch crosses the link while the step before computes.
class CudaDevice::Copies final : public CopyStream {
 public:
  explicit Copies(CudaDevice& device) : device_(device) {
    TCTL_CHECK(t_copy_device == nullptr, "a thread holds one copy stream at a time");
    CurrentDevice current(device.ordinal_, device.name_);
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), device.name_, "cudaStreamCreate");
    t_copy_device = &device;
    t_copy_stream = stream_;
  }
  ~Copies() override {
    CurrentDevice current(device_.ordinal_, device_.name_);
    // Its copies land before the stream goes (and before the buffers they write can be given back).
    cudaStreamSynchronize(stream_);
    if (t_copy_stream == stream_) {
      t_copy_device = nullptr;
      t_copy_stream = nullptr;
    }
    cudaStreamDestroy(stream_);
  }
  Copies(const Copies&) = delete;
  Copies& operator=(const Copies&) = delete;
  void wait_for_device() override {
    CurrentDevice current(device_.ordinal_, device_.name_);
    const CudaEvent queued(device_, false, device_.stream_);
    check(cudaStreamWaitEvent(stream_, queued.get(), 0), device_.name_, "cudaStreamWaitEvent");
  }
  void finish() noexcept override {
    // A failure here is the device's, which its next wait reports.
    int previous = 0;
    if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(device_.ordinal_) != cudaSuccess ||
        cudaStreamSynchronize(stream_) != cudaSuccess)
      cudaGetLastError();
    cudaSetDevice(previous);
  }

 private:
  CudaDevice& device_;
  cudaStream_t stream_ = nullptr;
};

std::unique_ptr<CopyStream> CudaDevice::copy_stream() {
  static const bool asked = env_flag_on("TCTL_CUDA_COPY_STREAM");
  if (!asked) return nullptr;
  return std::make_unique<Copies>(*this);
}

std::unique_ptr<OwnStream> CudaDevice::own_stream() {
  if (capturing() != nullptr) throw RuntimeError(name_ + ": a thread that records cannot take a stream of its own");
  return std::make_unique<Own>(*this);
}

void CudaDevice::queue_wait(const Event& event) {
  if (event.done()) return;
  if (capturing() != nullptr) throw RuntimeError(name_ + ": waiting for another stream's work cannot be recorded");
  CurrentDevice current(ordinal_, name_);
  if (const auto* e = dynamic_cast<const CudaEvent*>(&event)) {
    check(cudaStreamWaitEvent(stream(), e->get(), 0), name_, "cudaStreamWaitEvent");
  } else {
    const_cast<Event&>(event).wait();  // another kind: wait on the host
  }
}

std::size_t CudaDevice::take_staging() {
  const std::size_t k = next_staging_;
  next_staging_ = (k + 1) % kStagingBuffers;
  check(cudaEventSynchronize(staging_done_[k]), name_, "cudaEventSynchronize");  // its last transfer is done
  return k;
}

void CudaDevice::stage_from_host(char* dst, const char* src, std::size_t bytes, cudaStream_t stream) {
  std::lock_guard lock(staging_mu_);
  for (std::size_t off = 0; off < bytes; off += kStagingBytes) {
    const std::size_t n = std::min(kStagingBytes, bytes - off);
    const std::size_t k = take_staging();
    host_copy(static_cast<char*>(staging_[k]), src + off, n);
    check(cudaMemcpyAsync(dst + off, staging_[k], n, cudaMemcpyHostToDevice, stream), name_, "cudaMemcpyAsync");
    check(cudaEventRecord(staging_done_[k], stream), name_, "cudaEventRecord");
  }
}

void CudaDevice::stage_to_host(char* dst, const char* src, std::size_t bytes) {
  const std::uint64_t reports = report_mark();
  std::lock_guard lock(staging_mu_);
  // Chunk i+1 is on its way while chunk i is copied out of its staging buffer.
  struct Pending {
    std::size_t k, off, n;
  };
  std::optional<Pending> pending;
  auto drain = [&](const Pending& p) {
    check(cudaEventSynchronize(staging_done_[p.k]), name_, "cudaEventSynchronize");
    host_copy(dst + p.off, static_cast<const char*>(staging_[p.k]), p.n);
  };
  for (std::size_t off = 0; off < bytes; off += kStagingBytes) {
    const std::size_t n = std::min(kStagingBytes, bytes - off);
    const std::size_t k = take_staging();  // never the pending chunk's: the ring has more than two
    check(cudaMemcpyAsync(staging_[k], src + off, n, cudaMemcpyDeviceToHost, stream()), name_, "cudaMemcpyAsync");
    check(cudaEventRecord(staging_done_[k], stream()), name_, "cudaEventRecord");
    if (pending) drain(*pending);
    pending = Pending{k, off, n};
  }
  if (pending) drain(*pending);
  if (t_own_device != this) read_reports(reports);  // an own stream's wait does not cover the ring's copies
  rethrow_host_error();
}

void CudaDevice::host_copy(char* dst, const char* src, std::size_t bytes) {
  constexpr std::size_t kSplitBytes = std::size_t{256} << 10;  // below this, waking helpers costs more
  std::call_once(copy_pool_once_, [this] {
    const int helpers = std::min(4, ThreadPool::hardware_threads() / 4);
    if (helpers >= 2) copy_pool_ = std::make_unique<ThreadPool>(helpers);
  });
  if (copy_pool_ == nullptr || bytes < kSplitBytes) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const auto parts = static_cast<std::int64_t>(copy_pool_->size());
  copy_pool_->parallel_for(parts, 1, [&](std::int64_t begin, std::int64_t end) {
    // Part boundaries on 4 KiB pages, so no two threads write one cache line.
    const auto at = [&](std::int64_t i) {
      return std::min(bytes,
                      (bytes * static_cast<std::size_t>(i) / static_cast<std::size_t>(parts)) & ~std::size_t{4095});
    };
    const std::size_t from = at(begin), to = end == parts ? bytes : at(end);
    std::memcpy(dst + from, src + from, to - from);
  });
}

void CudaDevice::copy_from_host(void* dst, const void* src, std::size_t bytes) {
  CurrentDevice current(ordinal_, name_);
  if (Capture* c = capturing()) return c->copy_from_host(dst, src, bytes);
  stage_from_host(static_cast<char*>(dst), static_cast<const char*>(src), bytes,
                  t_copy_device == this ? t_copy_stream : stream());
}

void CudaDevice::copy_to_host(void* dst, const void* src, std::size_t bytes) {
  // Nothing to wait for, so no report may be read: their copies may not have landed.
  if (bytes == 0) return;
  if (capturing() != nullptr) throw RuntimeError(name_ + ": a copy to the host cannot be recorded");
  CurrentDevice current(ordinal_, name_);
  stage_to_host(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
}

void CudaDevice::copy_on_device(void* dst, const void* src, std::size_t bytes) {
  CurrentDevice current(ordinal_, name_);
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()), name_, "cudaMemcpyAsync");
}

void CudaDevice::run(HostWork& w) {
  try {
    w.work();
  } catch (...) {
    std::lock_guard lock(error_mu_);
    if (!host_error_) host_error_ = std::current_exception();
  }
}

void CUDART_CB CudaDevice::run_host_work(void* data) {
  std::unique_ptr<HostWork> w(static_cast<HostWork*>(data));
  w->device->run(*w);
}

void CUDART_CB CudaDevice::run_kept_host_work(void* data) {
  auto* w = static_cast<HostWork*>(data);
  w->device->run(*w);
}

void CudaDevice::enqueue(std::function<void()> work) {
  CurrentDevice current(ordinal_, name_);
  if (Capture* c = capturing()) return c->enqueue(std::move(work));
  auto w = std::make_unique<HostWork>(HostWork{this, std::move(work)});
  check(cudaLaunchHostFunc(stream(), run_host_work, w.get()), name_, "cudaLaunchHostFunc");
  w.release();  // run_host_work owns it now
}

void CudaDevice::enqueue_report(const void* src, std::size_t bytes, std::function<void(const void* host)> report) {
  TCTL_CHECK(bytes <= kReportBytes, "enqueue_report of more than kReportBytes");
  CurrentDevice current(ordinal_, name_);
  if (Capture* c = capturing()) return c->report(src, bytes, std::move(report));
  if (t_own_device == this) {
    // On an own stream the ring's order (one stream, read at the next wait) does not hold: the word is
    // read at once, after a wait for this stream alone, and what the report throws leaves the kernel here,
    // for this thread alone.
    check(cudaMemcpyAsync(t_own_report, src, bytes, cudaMemcpyDeviceToHost, t_own_stream), name_, "cudaMemcpyAsync");
    check(cudaStreamSynchronize(t_own_stream), name_, "cudaStreamSynchronize");
    report(t_own_report);
    return;
  }
  std::lock_guard lock(report_mu_);
  if (reports_.size() == kReportSlots) {  // no wait has read the ring since it filled: wait, read them all
    check(cudaStreamSynchronize(stream_), name_, "cudaStreamSynchronize");
    read_reports_locked(reports_queued_.load(std::memory_order_relaxed));
  }
  const std::uint64_t index = reports_queued_.load(std::memory_order_relaxed);
  char* slot = static_cast<char*>(report_ring_) + index % kReportSlots * kReportBytes;
  check(cudaMemcpyAsync(slot, src, bytes, cudaMemcpyDeviceToHost, stream_), name_, "cudaMemcpyAsync");
  add_report_locked(slot, std::move(report));
}

void CudaDevice::add_report_locked(const void* host, std::function<void(const void* host)> report) {
  const std::uint64_t index = reports_queued_.load(std::memory_order_relaxed);
  reports_.push_back({index, host, std::move(report)});
  reports_queued_.store(index + 1, std::memory_order_release);
}

std::uint64_t CudaDevice::report_mark() const { return reports_queued_.load(std::memory_order_acquire); }

bool CudaDevice::report_unread(std::uint64_t mark) {
  std::lock_guard lock(report_mu_);
  return !reports_.empty() && reports_.front().index < mark;
}

void CudaDevice::read_reports(std::uint64_t mark) {
  std::lock_guard lock(report_mu_);
  read_reports_locked(mark);
}

void CudaDevice::read_reports_locked(std::uint64_t mark) {
  while (!reports_.empty() && reports_.front().index < mark) {
    const PendingReport r = std::move(reports_.front());
    reports_.pop_front();
    try {
      r.report(r.host);
    } catch (...) {
      std::lock_guard error(error_mu_);
      if (!host_error_) host_error_ = std::current_exception();
    }
  }
}

void CudaDevice::rethrow_host_error() {
  std::exception_ptr e;
  {
    std::lock_guard lock(error_mu_);
    e = std::exchange(host_error_, nullptr);
  }
  if (e) std::rethrow_exception(e);
}

bool CudaDevice::supports(const Node& node) const {
  // An all-reduce of a collective not joined here runs on the CPU, which reaches the others without NCCL.
  if (node.op->name == "AllReduce") return has_nccl_comm(node.attrs.i("group"));
  // FusedUpdate's kernel (optimizers.cu) was written without a GPU at hand: until the GPU check has compared
  // it with the CPU's, it is used only when asked for, and the optimizer keeps an update per variable here.
  if (node.op->name == "FusedUpdate") {
    static const bool asked = env_flag_on("TCTL_CUDA_FUSED_UPDATES");
    if (!asked) return false;
  }
  return Device::supports(node);
}

void CudaDevice::make_current() {
  // The runtime's own check is a driver call; the thread's last choice, remembered, makes the common case
  // (one GPU, or a thread that stays on one) free.
  thread_local int current = -1;
  if (current == ordinal_) return;
  check(cudaSetDevice(ordinal_), name_, "cudaSetDevice");
  current = ordinal_;
}

void CudaDevice::synchronize() {
  if (capturing() != nullptr) throw RuntimeError(name_ + ": waiting for the stream cannot be recorded");
  CurrentDevice current(ordinal_, name_);
  const std::uint64_t reports = report_mark();
  // The calling thread's work: on its own stream, if it holds one (whose reports were read as they came).
  check(cudaStreamSynchronize(stream()), name_, "cudaStreamSynchronize");
  if (t_own_device != this) read_reports(reports);
  rethrow_host_error();
}

cublasHandle_t CudaDevice::cublas() {
  std::call_once(cublas_once_, [this] {
    CurrentDevice current(ordinal_, name_);
    if (const cublasStatus_t status = cublasCreate(&cublas_); status != CUBLAS_STATUS_SUCCESS)
      throw RuntimeError(name_ + ": cublasCreate failed: " + cublasGetStatusString(status));
    check(cudaMalloc(&cublas_workspace_, kCublasWorkspace), name_, "cudaMalloc (cuBLAS workspace)");
    check(cudaEventCreateWithFlags(&cublas_done_, cudaEventDisableTiming), name_, "cudaEventCreate");
    cublas_stream_ = stream_;
    if (cublasSetStream(cublas_, stream_) != CUBLAS_STATUS_SUCCESS ||
        cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspace) != CUBLAS_STATUS_SUCCESS ||
        cublasSetMathMode(cublas_, CUBLAS_PEDANTIC_MATH) != CUBLAS_STATUS_SUCCESS)
      throw RuntimeError(name_ + ": setting up cuBLAS failed");
  });
  return cublas_;
}

void CudaDevice::bind_cublas_to(cudaStream_t stream) {
  if (stream == cublas_stream_) return;
  // cublasSetStream puts the handle back on cuBLAS's default workspace pool: ours is set again after it.
  // Until both succeed the handle is bound to nothing known, so a failure makes the next call try again.
  cublas_stream_ = nullptr;
  if (cublasSetStream(cublas_, stream) != CUBLAS_STATUS_SUCCESS ||
      cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspace) != CUBLAS_STATUS_SUCCESS)
    throw RuntimeError(name_ + ": binding cuBLAS to a stream failed");
  cublas_stream_ = stream;
}

std::shared_ptr<Event> CudaDevice::record_event() {
  // Recorded work is not queued: the event marks the work queued before the recording began, as sim's does.
  if (Capture* c = capturing()) return c->queued_before();
  if (t_copy_device == this) return std::make_shared<CudaEvent>(*this, false, t_copy_stream);
  return std::make_shared<CudaEvent>(*this, false);
}

std::shared_ptr<Event> CudaDevice::record_timed_event() {
  if (capturing() != nullptr) throw RuntimeError(name_ + ": a timed event cannot be recorded");
  return std::make_shared<CudaEvent>(*this, true);
}

std::vector<std::pair<std::string, std::string>> CudaDevice::properties() const {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, ordinal_), name_, "cudaGetDeviceProperties");
  int driver = 0, runtime = 0;
  check(cudaDriverGetVersion(&driver), name_, "cudaDriverGetVersion");
  check(cudaRuntimeGetVersion(&runtime), name_, "cudaRuntimeGetVersion");
  auto version = [](int v) { return fmt::format("{}.{}", v / 1000, v % 1000 / 10); };
  return {{"gpu", prop.name},
          {"memory", fmt::format("{:.1f} GiB", static_cast<double>(prop.totalGlobalMem) / (1 << 30))},
          {"compute capability", fmt::format("{}.{}", prop.major, prop.minor)},
          {"multiprocessors", std::to_string(prop.multiProcessorCount)},
          {"driver", version(driver)},
          {"runtime", version(runtime)},
          {"cudnn", cudnn_status()}};
}

}  // namespace tctl::cuda
