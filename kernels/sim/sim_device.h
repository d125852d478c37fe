// The simulated device `sim:N`: a device that is not the CPU, on every machine. Its memory is an arena of
// its own (host memory, pooled by size), its work runs in order on its own stream, and its kernels
// (kernels/sim/) refuse any buffer that lives elsewhere. It exists so that placement, copies between
// devices, colocation of variables, fall-back and deferred release of buffers are tested without a GPU.
//
// TCTL_SIM_MEMORY_LIMIT (bytes, in the environment) caps the memory it holds in use, so tests meet a
// device out of memory. The stream runs work at once, in the order it is queued, on the thread that queues it (one at a
// time); a test may pause it, and then work waits in the queue until resume(), the way a GPU's work trails the host.
// While work waits, a freed block is not handed out again: that is the deferred release every device with a stream
// needs. A timed event notes the steady-clock time at which the stream reached it (the work queued before it had
// finished), so the profiler sees queued work run later, as on a GPU.
//
// It records as a GPU captures a stream into a CUDA graph (Device::begin_recording): while a thread records,
// the work it queues is kept, not run, and a replay queues all of it as one item. A replay that allocates
// throws, because on a GPU its address would differ from the one captured: that makes the hazards a CUDA
// graph meets silently into errors the tests see.
#pragma once

#include <atomic>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "core/caching_pool.h"
#include "core/device.h"

namespace tctl {

class SimEvent;

// How many sim devices every process has: sim:0 and sim:1 (registered as backend "sim" in sim_device.cpp).
inline constexpr int kSimDevices = 2;

class SimDevice final : public Device {
 public:
  explicit SimDevice(int index);
  ~SimDevice() override;

  DeviceKind kind() const override { return kind_; }
  const std::string& name() const override { return name_; }
  bool host_addressable() const override { return true; }
  void* allocate(std::size_t bytes) override;
  void deallocate(void* p, std::size_t bytes) override;
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override;
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override;
  void copy_on_device(void* dst, const void* src, std::size_t bytes) override;
  void enqueue(std::function<void()> work) override;
  void synchronize() override;
  std::shared_ptr<Event> record_event() override;
  std::shared_ptr<Event> record_timed_event() override;
  DeviceMemoryStats memory_stats() const override;
  std::unique_ptr<Recording> begin_recording() override;
  bool can_record() const override { return true; }
  // Its copies run in order on its one stream, so nothing overlaps; it has one so that the fit loop moves
  // batches on sim as it does on a GPU (into buffers kept from batch to batch, each read after its event).
  std::unique_ptr<CopyStream> copy_stream() override;
  // Its AllReduce kernel runs the CPU's on its own buffers (kernels/sim/sim_kernels.cpp), as NCCL's does on a
  // GPU's, so placement and copies of a device's own all-reduce are tested without one.
  std::string collective_refusal(const Collective& /*collective*/) const override { return ""; }
  std::vector<std::pair<std::string, std::string>> properties() const override {
    return {{"simulated", "host memory in a pool of its own, a stream of its own; for tests"}};
  }

  // For tests: while paused, queued work waits; resume() runs it in order. Kernels may not run meanwhile.
  void pause();
  void resume();
  // For tests: the next recording's finish() throws, as a GPU's may when it cannot make a graph ready.
  void fail_next_finish() { fail_next_finish_.store(true); }
  // Whether a recording finishing now must throw (fail_next_finish), once.
  bool take_finish_failure() { return fail_next_finish_.exchange(false); }
  // Whether `p` is a block this device handed out and has not taken back.
  bool owns(const void* p) const;
  // Whether the calling thread records its work on `device` now (a sim kernel then records a closure over
  // its inputs' and output's buffers instead of running).
  static bool recording_on(const Device& device);
  // The step of the replay of `device`'s recorded work the calling thread runs now, if it runs one: a recorded
  // kernel's random numbers are that step's (Replay::launch), as a CUDA graph's read the step each launch writes.
  static std::optional<std::int64_t> replay_step(const Device& device);

 private:
  friend class SimEvent;
  friend class SimReplay;
  // Runs or queues one piece of work; the caller holds stream_mu_.
  void submit_locked(std::function<void()> work);
  void run_one_locked(std::function<void()>& work);
  void rethrow_locked();
  // Notes the time on the timed events the stream reaches once `finished` items are done.
  void stamp_reached_locked(std::uint64_t finished);

  // Looked up once: kind() is asked for each node the executor runs.
  const DeviceKind kind_ = device_kind("sim");
  std::string name_;
  std::atomic<bool> fail_next_finish_{false};
  std::size_t limit_;  // TCTL_SIM_MEMORY_LIMIT, 0 for none
  // The stream.
  mutable std::mutex stream_mu_;
  std::deque<std::function<void()>> queue_;
  bool paused_ = false;
  std::exception_ptr error_;
  std::atomic<std::uint64_t> queued_{0};    // work items queued so far
  std::atomic<std::uint64_t> finished_{0};  // work items finished so far, in queue order
  // Timed events the stream has not reached yet, in queue order; under stream_mu_, as the queue.
  std::deque<std::shared_ptr<SimEvent>> unstamped_;
  CachingPool pool_;
};

}  // namespace tctl
