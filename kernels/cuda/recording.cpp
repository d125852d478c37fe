// CUDA graphs: CudaDevice's recordings (Device::begin_recording) and their replays. core/device_graph.h
// decides what to record and checks, before each launch, that the buffers a recording names are still
// there; this file captures a thread's work into a graph and launches it.
//
// A recording captures the thread's work on a stream of its own, begun for it and never running anything,
// so a copy another thread queues on the device's stream meanwhile (the fit loop's producer moving the
// next batch) neither lands in the graph nor waits on it. What a capture cannot hold throws RuntimeError
// from the device's members (copy_to_host, synchronize, a timed event, a wait on another stream), which
// makes core run the segment node by node from then on, saying why.
//
// A replay writes the buffers the capture saw. The frame and the variables keep the inputs and outputs;
// a kernel's own temporaries (an update's verdict word, FusedUpdate's table) are freed during the capture,
// so the recording keeps those blocks out of the pool until the replay goes. A copy from the host is taken
// from a pinned copy of its bytes made at capture (a graph cannot copy from pageable memory; core stages a
// step's inputs on the device before the launch, so only a kernel's constants arrive this way). A report
// (enqueue_report) is a copy into a pinned word of the replay's, queued with its reader at every launch. A
// kernel that draws random numbers reads the step from a word of the replay's, which each launch writes first
// (launch.h's StepKey).
#include "kernels/cuda/recording.h"

#include <cstring>

#include "core/errors.h"
#include "kernels/cuda/cuda_util.h"

namespace tctl::cuda {

thread_local CudaDevice::Capture* CudaDevice::t_capture_ = nullptr;

void CudaDevice::Kept::release(CachingPool& pool) {
  for (auto [p, bytes] : blocks) pool.deallocate(p, done_event());
  for (void* p : pinned) cudaFreeHost(p);
  blocks.clear();
  pinned.clear();
}

class CudaDevice::GraphReplay final : public Replay {
 public:
  GraphReplay(CudaDevice& device, cudaGraphExec_t exec, Kept kept)
      : device_(device), exec_(exec), kept_(std::move(kept)) {
    CurrentDevice current(device.ordinal_, device.name_);
    if (cudaEventCreateWithFlags(&launched_, cudaEventDisableTiming) != cudaSuccess) {
      cudaGetLastError();
      release();
      throw RuntimeError(device.name_ + ": cudaEventCreate failed");
    }
  }
  ~GraphReplay() override {
    CurrentDevice current(device_.ordinal_, device_.name_);
    // The last launch may still write the kept blocks and words. Its reports, queued, point into the words
    // about to go: they are read now (what they throw waits, as ever, for the next wait). On a failed
    // device the wait fails too, and its error is the one the next wait reports.
    cudaEventSynchronize(launched_);
    cudaGetLastError();
    cudaEventDestroy(launched_);
    device_.read_reports(reports_end_);
    release();
  }
  GraphReplay(const GraphReplay&) = delete;
  GraphReplay& operator=(const GraphReplay&) = delete;

  void launch(std::int64_t step) override {
    CurrentDevice current(device_.ordinal_, device_.name_);
    // The launch rewrites the words the last one's reports read: those are read first, after a wait if no
    // wait has covered them yet (a run waits for its devices at its end, so this is the rare case).
    if (!kept_.reports.empty() && device_.report_unread(reports_end_)) device_.synchronize();
    const cudaStream_t stream = device_.stream();
    // Under the reports' lock: a report another thread queues comes wholly before the launch or after it,
    // so a wait for launched_ covers every report numbered before reports_end_.
    std::lock_guard lock(device_.report_mu_);
    if (kept_.step_word != nullptr) {
      write_step_word(stream, kept_.step_word, step);
      check(cudaGetLastError(), device_.name_, "the step word's write");
    }
    check(cudaGraphLaunch(exec_, stream), device_.name_, "cudaGraphLaunch");
    if (const cudaError_t status = cudaEventRecord(launched_, stream); status != cudaSuccess) {
      // launched_ would not cover this launch, which may still write what the destructor gives back.
      cudaDeviceSynchronize();
      check(status, device_.name_, "cudaEventRecord");
    }
    for (const Kept::Report& r : kept_.reports) device_.add_report_locked(r.word, r.read);
    reports_end_ = device_.reports_queued_.load(std::memory_order_relaxed);
  }

 private:
  void release() {
    cudaGraphExecDestroy(exec_);
    kept_.release(device_.pool_);
  }

  CudaDevice& device_;
  cudaGraphExec_t exec_;
  Kept kept_;
  cudaEvent_t launched_ = nullptr;  // recorded after each launch
  std::uint64_t reports_end_ = 0;   // the report index after the last launch's
};

CudaDevice::Capture::Capture(CudaDevice& device) : device_(device) {
  TCTL_CHECK(t_capture_ == nullptr, "a second recording on one thread");
  // A product then waits for another stream's event (CublasCall), and a write marks its end with an event
  // (Variable::Update): neither can be captured.
  if (device.has_own_streams())
    throw RuntimeError(device.name_ + ": work cannot be recorded while threads hold streams of their own");
  before_ = device.record_event();
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), device.name_, "cudaStreamCreate");
  std::lock_guard lock(device.capture_mu_);
  // Relaxed: the thread may still allocate (a kernel's temporaries), which the other modes forbid.
  if (const cudaError_t status = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed); status != cudaSuccess) {
    cudaStreamDestroy(stream_);
    check(status, device.name_, "cudaStreamBeginCapture");
  }
  ++device.captures_;
  t_capture_ = this;
}

CudaDevice::Capture::~Capture() {
  CurrentDevice current(device_.ordinal_, device_.name_);
  if (t_capture_ == this) end_capture();
  if (!handed_over_) {
    kept_.release(device_.pool_);  // nothing recorded has run
  }
  {
    // A stream made later at the same address must not pass for this one (as Own's).
    std::lock_guard lock(device_.cublas_mu_);
    if (device_.cublas_stream_ == stream_) device_.cublas_stream_ = nullptr;
  }
  cudaStreamDestroy(stream_);
}

std::unique_ptr<Replay> CudaDevice::Capture::finish() {
  CurrentDevice current(device_.ordinal_, device_.name_);
  cudaGraph_t graph = end_capture();
  if (graph == nullptr) throw RuntimeError(device_.name_ + ": the capture failed: " + ended_with_);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw RuntimeError(device_.name_ + ": cudaGraphInstantiate failed: " + cudaGetErrorString(status));
  }
  handed_over_ = true;  // the replay gives them back, also when making it fails
  return std::make_unique<GraphReplay>(device_, exec, std::move(kept_));
}

void CudaDevice::Capture::copy_from_host(void* dst, const void* src, std::size_t bytes) {
  void* bytes_now = pinned(bytes);
  std::memcpy(bytes_now, src, bytes);
  check(cudaMemcpyAsync(dst, bytes_now, bytes, cudaMemcpyHostToDevice, stream_), device_.name_, "cudaMemcpyAsync");
}

void CudaDevice::Capture::enqueue(std::function<void()> work) {
  kept_.works.push_back(std::make_unique<HostWork>(HostWork{&device_, std::move(work)}));
  check(cudaLaunchHostFunc(stream_, run_kept_host_work, kept_.works.back().get()), device_.name_, "cudaLaunchHostFunc");
}

void CudaDevice::Capture::report(const void* src, std::size_t bytes, std::function<void(const void* host)> read) {
  void* word = pinned(kReportBytes);
  check(cudaMemcpyAsync(word, src, bytes, cudaMemcpyDeviceToHost, stream_), device_.name_, "cudaMemcpyAsync");
  kept_.reports.push_back({word, std::move(read)});
}

std::int64_t* CudaDevice::Capture::step_word() {
  if (kept_.step_word == nullptr) {
    void* p = device_.pool_.allocate(sizeof(std::int64_t));
    kept_.blocks.emplace_back(p, sizeof(std::int64_t));
    kept_.step_word = static_cast<std::int64_t*>(p);
  }
  return kept_.step_word;
}

const std::int64_t* CudaDevice::recording_step_word() {
  Capture* c = capturing();
  return c != nullptr ? c->step_word() : nullptr;
}

void* CudaDevice::Capture::pinned(std::size_t bytes) {
  void* p = nullptr;
  check(cudaMallocHost(&p, bytes == 0 ? 1 : bytes), device_.name_, "cudaMallocHost");
  kept_.pinned.push_back(p);
  return p;
}

cudaGraph_t CudaDevice::Capture::end_capture() {
  t_capture_ = nullptr;
  cudaGraph_t graph = nullptr;
  const cudaError_t status = cudaStreamEndCapture(stream_, &graph);
  {
    // Under the lock, so no capture begins while the blocks the pool gave back meanwhile are freed.
    std::lock_guard lock(device_.capture_mu_);
    if (--device_.captures_ == 0) {
      for (void* p : device_.deferred_frees_) cudaFree(p);
      device_.deferred_frees_.clear();
    }
  }
  if (status != cudaSuccess) {
    cudaGetLastError();
    ended_with_ = cudaGetErrorString(status);
    if (graph != nullptr) cudaGraphDestroy(graph);
    return nullptr;
  }
  return graph;
}

CudaDevice::Capture* CudaDevice::capturing() const {
  return t_capture_ != nullptr && &t_capture_->device() == this ? t_capture_ : nullptr;
}

std::unique_ptr<Recording> CudaDevice::begin_recording() {
  CurrentDevice current(ordinal_, name_);
  return std::make_unique<Capture>(*this);
}

bool CudaDevice::can_record() const {
  static const bool asked = env_flag_on("TCTL_CUDA_GRAPHS");
  return asked;
}

}  // namespace tctl::cuda
