#include "kernels/sim/sim_device.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/errors.h"

namespace tctl {

namespace {
// The device whose stream work this thread is running, if any: work it queues from inside (a kernel that
// clones a buffer) is the current item's own and runs at once, in order, without taking the stream again.
thread_local const SimDevice* t_running = nullptr;
// The device whose recorded work this thread is replaying: an allocation then is an error.
thread_local const SimDevice* t_replaying = nullptr;
// The step of that replay (Replay::launch), whose random numbers its kernels draw.
thread_local std::int64_t t_replay_step = 0;

std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

class SimEvent final : public Event {
 public:
  SimEvent(SimDevice& device, std::uint64_t position) : device_(device), position_(position) {}
  bool done() const override { return device_.finished_.load(std::memory_order_acquire) >= position_; }
  void wait() override {
    std::lock_guard lock(device_.stream_mu_);
    TCTL_CHECK(done() || !device_.paused_, "waiting for an event of " + device_.name() + " while its stream is paused");
    device_.rethrow_locked();
  }
  std::optional<double> elapsed_us_since(const Event& earlier) const override {
    const auto* from = dynamic_cast<const SimEvent*>(&earlier);
    if (from == nullptr || &from->device_ != &device_) return std::nullopt;
    const std::int64_t to_ns = stamp_ns_.load(std::memory_order_acquire);
    const std::int64_t from_ns = from->stamp_ns_.load(std::memory_order_acquire);
    if (to_ns < 0 || from_ns < 0) return std::nullopt;
    return static_cast<double>(to_ns - from_ns) / 1000.0;
  }
  std::uint64_t position() const { return position_; }
  void stamp(std::int64_t ns) { stamp_ns_.store(ns, std::memory_order_release); }

 private:
  SimDevice& device_;
  std::uint64_t position_;
  // Steady-clock nanoseconds at which the stream reached it; -1 before, and always for an untimed event.
  std::atomic<std::int64_t> stamp_ns_{-1};
};

// The recorded work, in order; a replay runs all of it as one item of the stream.
using Recorded = std::vector<std::function<void()>>;

class SimReplay final : public Replay {
 public:
  SimReplay(SimDevice& device, std::shared_ptr<const Recorded> work) : device_(device), work_(std::move(work)) {}
  void launch(std::int64_t step) override {
    std::lock_guard lock(device_.stream_mu_);
    device_.submit_locked([device = &device_, work = work_, step] {
      const SimDevice* outer = std::exchange(t_replaying, device);
      const std::int64_t outer_step = std::exchange(t_replay_step, step);
      try {
        for (const auto& item : *work) item();
      } catch (...) {
        t_replaying = outer;
        t_replay_step = outer_step;
        throw;
      }
      t_replaying = outer;
      t_replay_step = outer_step;
    });
  }

 private:
  SimDevice& device_;
  std::shared_ptr<const Recorded> work_;
};

namespace {
// The recording the calling thread makes, if any.
class SimRecording;
thread_local SimRecording* t_recording = nullptr;

class SimRecording final : public Recording {
 public:
  explicit SimRecording(SimDevice& device) : device_(device) {
    TCTL_CHECK(t_recording == nullptr, "a second recording on one thread");
    t_recording = this;
  }
  ~SimRecording() override { t_recording = nullptr; }
  std::unique_ptr<Replay> finish() override {
    t_recording = nullptr;
    if (device_.take_finish_failure())
      throw RuntimeError(device_.name() + ": the recording could not be made ready to launch");
    return std::make_unique<SimReplay>(device_, std::make_shared<const Recorded>(std::move(work_)));
  }
  const SimDevice& device() const { return device_; }
  void add(std::function<void()> work) { work_.push_back(std::move(work)); }

 private:
  SimDevice& device_;
  Recorded work_;
};

SimRecording* recording_of(const SimDevice* device) {
  return t_recording != nullptr && &t_recording->device() == device ? t_recording : nullptr;
}
}  // namespace

bool SimDevice::recording_on(const Device& device) {
  return t_recording != nullptr && &t_recording->device() == &device;
}

std::optional<std::int64_t> SimDevice::replay_step(const Device& device) {
  if (t_replaying != &device) return std::nullopt;
  return t_replay_step;
}

std::unique_ptr<Recording> SimDevice::begin_recording() { return std::make_unique<SimRecording>(*this); }

namespace {
class SimCopyStream final : public CopyStream {
 public:
  void wait_for_device() override {}  // one stream: every copy follows the work queued before it
  void finish() noexcept override {}
};
}  // namespace

std::unique_ptr<CopyStream> SimDevice::copy_stream() { return std::make_unique<SimCopyStream>(); }

namespace {
// TCTL_SIM_MEMORY_LIMIT: the bytes a sim device may hold in use at once (0, or unset: no limit), so tests
// meet a device running out of memory the way a GPU does.
std::size_t sim_memory_limit() {
  const char* v = std::getenv("TCTL_SIM_MEMORY_LIMIT");
  return v == nullptr ? 0 : static_cast<std::size_t>(std::strtoull(v, nullptr, 10));
}
}  // namespace

SimDevice::SimDevice(int index)
    : name_("sim:" + std::to_string(index)),
      limit_(sim_memory_limit()),
      pool_(
          name_, [](std::size_t size) { return std::aligned_alloc(256, size); }, [](void* p) { std::free(p); }) {}

SimDevice::~SimDevice() = default;

void* SimDevice::allocate(std::size_t bytes) {
  if (t_replaying == this)
    throw RuntimeError(name_ + ": an allocation of " + std::to_string(bytes) +
                       " bytes while replaying recorded work, whose buffers are fixed when it is recorded");
  if (limit_ > 0 && pool_.stats().bytes_in_use + bytes > limit_)
    throw RuntimeError(name_ + ": out of memory allocating " + std::to_string(bytes) + " bytes (" +
                       std::to_string(pool_.stats().bytes_in_use) + " of its " + std::to_string(limit_) +
                       " bytes in use)");
  return pool_.allocate(bytes);
}

// Work queued so far may still read the block: it is free once the stream has finished that work.
void SimDevice::deallocate(void* p, std::size_t) { pool_.deallocate(p, record_event()); }

bool SimDevice::owns(const void* p) const { return pool_.owns(p); }

DeviceMemoryStats SimDevice::memory_stats() const { return pool_.stats(); }

void SimDevice::run_one_locked(std::function<void()>& work) {
  const SimDevice* outer = std::exchange(t_running, this);
  try {
    work();
  } catch (...) {
    if (!error_) error_ = std::current_exception();
  }
  t_running = outer;
  // Stamped before finished_ moves, so an event seen done already has its time.
  stamp_reached_locked(finished_.load(std::memory_order_relaxed) + 1);
  finished_.fetch_add(1, std::memory_order_release);
}

void SimDevice::stamp_reached_locked(std::uint64_t finished) {
  if (unstamped_.empty() || unstamped_.front()->position() > finished) return;
  const std::int64_t now = steady_now_ns();
  while (!unstamped_.empty() && unstamped_.front()->position() <= finished) {
    unstamped_.front()->stamp(now);
    unstamped_.pop_front();
  }
}

void SimDevice::submit_locked(std::function<void()> work) {
  queued_.fetch_add(1, std::memory_order_acq_rel);
  if (paused_) {
    queue_.push_back(std::move(work));
    return;
  }
  run_one_locked(work);
}

void SimDevice::enqueue(std::function<void()> work) {
  if (t_running == this) return work();
  if (SimRecording* r = recording_of(this)) return r->add(std::move(work));
  std::lock_guard lock(stream_mu_);
  submit_locked(std::move(work));
}

void SimDevice::copy_from_host(void* dst, const void* src, std::size_t bytes) {
  // The source may be reused once this returns, so a copy that must wait takes its bytes along.
  if (t_running == this) return void(std::memcpy(dst, src, bytes));
  // Recorded, the copy writes the bytes `src` holds now at every replay, as CUDA's recording does (a
  // captured copy reads pinned memory, which it fills now: kernels/cuda/recording.cpp).
  if (SimRecording* r = recording_of(this)) {
    auto now =
        std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
    return r->add([dst, now] { std::memcpy(dst, now->data(), now->size()); });
  }
  std::lock_guard lock(stream_mu_);
  if (!paused_) {
    submit_locked([=] { std::memcpy(dst, src, bytes); });
    return;
  }
  auto staged =
      std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
  submit_locked([dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
}

void SimDevice::copy_to_host(void* dst, const void* src, std::size_t bytes) {
  if (t_running == this) return void(std::memcpy(dst, src, bytes));
  if (recording_of(this) != nullptr) throw RuntimeError(name_ + ": a copy to the host cannot be recorded");
  std::lock_guard lock(stream_mu_);
  TCTL_CHECK(!paused_, "a copy from " + name_ + " to the host while its stream is paused would never finish");
  submit_locked([=] { std::memcpy(dst, src, bytes); });
  rethrow_locked();
}

void SimDevice::copy_on_device(void* dst, const void* src, std::size_t bytes) {
  enqueue([=] { std::memcpy(dst, src, bytes); });
}

void SimDevice::rethrow_locked() {
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void SimDevice::synchronize() {
  if (t_running == this) return;  // everything queued before the running item has finished
  if (recording_of(this) != nullptr) throw RuntimeError(name_ + ": waiting for the stream cannot be recorded");
  std::lock_guard lock(stream_mu_);
  TCTL_CHECK(!paused_ || queue_.empty(), "synchronizing " + name_ + " while its stream is paused would never finish");
  rethrow_locked();
}

std::shared_ptr<Event> SimDevice::record_event() {
  return std::make_shared<SimEvent>(*this, queued_.load(std::memory_order_acquire));
}

std::shared_ptr<Event> SimDevice::record_timed_event() {
  if (recording_of(this) != nullptr) throw RuntimeError(name_ + ": a timed event cannot be recorded");
  // Work running on the stream holds stream_mu_ already, on this thread.
  std::unique_lock lock(stream_mu_, std::defer_lock);
  if (t_running != this) lock.lock();
  auto event = std::make_shared<SimEvent>(*this, queued_.load(std::memory_order_acquire));
  if (event->done()) {
    event->stamp(steady_now_ns());  // the stream has passed that point: it reaches the event as it is recorded
  } else {
    unstamped_.push_back(event);
  }
  return event;
}

void SimDevice::pause() {
  std::lock_guard lock(stream_mu_);
  paused_ = true;
}

void SimDevice::resume() {
  std::lock_guard lock(stream_mu_);
  paused_ = false;
  while (!queue_.empty()) {
    std::function<void()> work = std::move(queue_.front());
    queue_.pop_front();
    run_one_locked(work);
  }
}

namespace {

ProvidedDevices sim_devices() {
  ProvidedDevices out;
  for (int i = 0; i < kSimDevices; ++i) out.devices.push_back(std::make_unique<SimDevice>(i));
  return out;
}
// sim goes through the same registration as any backend, so placement and names meet nothing special in it.
[[maybe_unused]] const bool sim_backend_registered =
    register_backend({.name = "sim", .provider = sim_devices, .graph_colour = "#fbefc4"});

}  // namespace

}  // namespace tctl
