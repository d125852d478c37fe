#include "core/variable.h"

#include <atomic>
#include <utility>

namespace tctl {

namespace {
// The one lock of LockingMode::kProcess, after TensorFlow.NET's Locks.ProcessWide. A kernel that updates
// several variables (Adam: the weights and two slots) takes it once per variable, so a thread that already
// holds it must not take it again: the depth counts this thread's holds.
std::mutex& process_mutex() {
  static std::mutex mu;
  return mu;
}
thread_local int t_process_depth = 0;

std::unique_lock<std::mutex> lock_process(const Variable& v) {
  if (t_process_depth++ > 0) return {};
  schedule_point({.access = Access::kLock, .location = &process_mutex(), .variable = &v});
  return std::unique_lock(process_mutex());
}
}  // namespace

Variable::Variable(std::string name, Tensor initial, LockingMode mode, bool trainable)
    : name_(std::move(name)), shape_(initial.shape()), dtype_(initial.dtype()), mode_(mode), trainable_(trainable) {
  if (initial.defined()) device_.store(initial.device(), std::memory_order_relaxed);
  if (mode_ == LockingMode::kSnapshot) {
    version_ = std::make_shared<const Tensor>(std::move(initial));
  } else {
    value_ = std::move(initial);
  }
}

std::shared_ptr<const Tensor> Variable::current_version() const {
  std::lock_guard lock(version_mu_);
  return version_;
}

std::shared_ptr<const Tensor> Variable::current_version(std::shared_ptr<Event>& written) const {
  schedule_point({.access = Access::kReadVersion, .location = &version_, .variable = this});
  std::lock_guard lock(version_mu_);
  written = version_written_;
  return version_;
}

void Variable::wait_for_write(Device* device, const std::shared_ptr<Event>& written) {
  if (written != nullptr && device->has_own_streams()) device->queue_wait(*written);
}

bool Variable::holds_current(const Tensor& held, std::uint64_t writes) const {
  if (lock_free() || !held.defined()) return false;
  if (mode_ == LockingMode::kSnapshot) return current_version()->shares_buffer_with(held);
  return this->writes() == writes;
}

void Variable::publish(std::shared_ptr<const Tensor> next, std::shared_ptr<Event> written) {
  schedule_point({.access = Access::kPublish, .location = &version_, .variable = this});
  std::lock_guard lock(version_mu_);
  version_.swap(next);
  version_written_.swap(written);
}

bool Variable::lock_free() const {
  return mode_ == LockingMode::kNone || mode_ == LockingMode::kAtomic || mode_ == LockingMode::kDataflow;
}

std::unique_lock<std::mutex> Variable::lock_for_mode() const {
  if (mode_ == LockingMode::kProcess) return lock_process(*this);
  if (mode_ == LockingMode::kMutex || mode_ == LockingMode::kSnapshot) {
    schedule_point({.access = Access::kLock, .location = &mu_, .variable = this});
    return std::unique_lock(mu_);
  }
  return {};
}

void Variable::unlock_for_mode(std::unique_lock<std::mutex>& lock) const {
  if (mode_ == LockingMode::kProcess) --t_process_depth;
  if (!lock.owns_lock()) return;
  schedule_point({.access = Access::kUnlock, .location = lock.mutex(), .variable = this});
  lock.unlock();
}

Tensor Variable::read() const {
  if (!lock_free()) {
    std::uint64_t writes = 0;
    return read(writes);
  }
  // value_ is never replaced in these modes, so its handle is read without a lock; its elements are not.
  // A device's own copy (one stream orders it among the updates) is as torn as the host's loop below.
  if (!value_.device()->host_addressable()) return value_.clone();
  Tensor out = Tensor::empty(dtype_, shape_, value_.device());
  float* dst = out.mutable_data<float>();
  float* src = value_.mutable_data<float>();
  if (thread_step_scheduler() != nullptr) {
    for (std::int64_t i = 0; i < out.num_elements(); ++i) {
      schedule_point({.access = Access::kLoad, .location = src + i, .variable = this, .index = i});
      dst[i] = std::atomic_ref<float>(src[i]).load(std::memory_order_relaxed);
      schedule_result(dst[i]);
    }
    return out;
  }
  for (std::int64_t i = 0; i < out.num_elements(); ++i)
    dst[i] = std::atomic_ref<float>(src[i]).load(std::memory_order_relaxed);
  return out;
}

Tensor Variable::read(std::uint64_t& writes) const {
  TCTL_CHECK(!lock_free(), "read(writes) of " + name_ + ", whose reads are not snapshots");
  if (mode_ == LockingMode::kSnapshot) {
    // The count first: a version published in between makes the count old, never the value.
    writes = writes_.load(std::memory_order_acquire);
    std::shared_ptr<Event> written;
    Tensor out = *current_version(written);
    wait_for_write(device(), written);
    return out;
  }
  std::unique_lock lock = lock_for_mode();
  writes = writes_.load(std::memory_order_relaxed);
  Tensor out = value_;
  wait_for_write(device(), written_);
  unlock_for_mode(lock);
  return out;
}

// Under the lock no new read can appear, so a use count of one proves nobody else sees the buffer.
void Variable::make_unique_locked() {
  if (!value_.unique()) value_ = value_.clone();
}

void Variable::own_buffer() {
  if (mode_ != LockingMode::kMutex && mode_ != LockingMode::kProcess) return;
  for (;;) {
    Tensor current;
    {
      HandleLock lock(*this);
      if (value_.unique()) return;
      current = value_;
    }
    // Copied without the lock, as place_on copies: a kernel on the device takes the lock inside the device's
    // stream, so queueing the copy under it would order the two locks both ways.
    Tensor copy = current.clone();
    HandleLock lock(*this);
    // Still the buffer copied: no write reached it meanwhile (a write copies a buffer someone holds, and
    // `current` holds it). Else the write's own copy made it the variable's; look again.
    if (value_.shares_buffer_with(current)) {
      value_ = std::move(copy);
      return;
    }
  }
}

Device* Variable::device() const { return device_.load(std::memory_order_acquire); }

void Variable::place_on(Device* device) {
  // The copy is made without the variable's lock: a kernel on the target device takes that lock inside the
  // device's stream, so copying (which queues on the stream) under it would order the two locks both ways.
  // A write that lands meanwhile is seen below, and the move starts over from the new value.
  while (device_.load(std::memory_order_acquire) != device) {
    const Tensor current = mode_ == LockingMode::kSnapshot ? *current_version() : locked_value();
    const Tensor moved = [&] {
      try {
        return current.to(device);
      } catch (const RuntimeError& e) {
        // The device's own message names the bytes, not whose they were.
        throw RuntimeError("variable " + name_ + " " + shape_.to_string() + ": " + e.what());
      }
    }();
    HandleLock lock(*this);
    const bool unchanged = mode_ == LockingMode::kSnapshot ? current_version()->shares_buffer_with(current)
                                                           : value_.shares_buffer_with(current);
    if (unchanged) {
      if (mode_ == LockingMode::kSnapshot) {
        publish(std::make_shared<const Tensor>(moved));
      } else {
        value_ = moved;
      }
      device_.store(device, std::memory_order_release);
    }
  }
}

Variable::HandleLock::HandleLock(const Variable& v) : v_(v), mode_lock_(v.lock_for_mode()) {
  if (!mode_lock_.owns_lock() && v.mode_ != LockingMode::kProcess) own_ = std::unique_lock(v.mu_);
}

Variable::HandleLock::~HandleLock() { v_.unlock_for_mode(mode_lock_); }

Tensor Variable::locked_value() const {
  HandleLock lock(*this);
  return value_;
}

void Variable::assign(const Tensor& given) {
  TCTL_CHECK(given.shape() == shape_ && given.dtype() == dtype_, "assign to " + name_ + " with another shape");
  const Tensor value = given.to(device());
  Update u(*this);
  if (!value.device()->host_addressable()) {
    value.device()->copy_on_device(u.device_data(), value.raw_data(), value.bytes());
    return;
  }
  const float* src = value.data<float>();
  for (std::int64_t i = 0; i < u.size(); ++i) u.apply(i, [&](float) { return src[i]; });
}

void Variable::add_scaled(const Tensor& delta, float sign) {
  TCTL_CHECK(delta.num_elements() == shape_.num_elements(), "update of " + name_ + " with another size");
  if (!device()->host_addressable()) {
    // Off the host (a GPU): the sum is formed on the host and written back whole; a rare path (tests,
    // race-check's host scenario), not a training step's, whose updates are device kernels.
    Tensor sum = read().to(cpu_device());
    const Tensor on_host = delta.to(cpu_device());
    const float* d = on_host.data<float>();
    float* s = sum.mutable_data<float>();
    for (std::int64_t i = 0; i < sum.num_elements(); ++i) s[i] += sign * d[i];
    assign(sum);
    return;
  }
  const Tensor on_device = delta.to(device());
  Update u(*this);
  const float* d = on_device.data<float>();
  for (std::int64_t i = 0; i < u.size(); ++i) u.apply(i, [&](float old) { return old + sign * d[i]; });
}

void Variable::assign_add(const Tensor& delta) { add_scaled(delta, 1.0f); }
void Variable::assign_sub(const Tensor& delta) { add_scaled(delta, -1.0f); }

Variable::Update::Update(Variable& v)
    : v_(v), size_(v.shape_.num_elements()), scheduled_(thread_step_scheduler() != nullptr) {
  lock_ = v.lock_for_mode();
  try {
    init();
    plain_ = !shared_ && !scheduled_;
  } catch (...) {
    v.unlock_for_mode(lock_);  // no destructor runs: the lock (and process mode's depth) goes back here
    throw;
  }
}

void Variable::Update::init() {
  Variable& v = v_;
  device_ = v.device();  // in the locked modes under the lock, which place_on takes to move the value
  // In the locked modes the copy below and the kernel after it wait for the last write, on whichever of
  // the device's streams it was queued; the lock-free modes order nothing, on a device as on the CPU.
  switch (v.mode_) {
    case LockingMode::kMutex:
    case LockingMode::kProcess:
      wait_for_write(device_, v.written_);
      // A reader's kernel on another stream may still be reading the buffer after the reader let go of
      // it, so with own streams a write never goes in place: the old buffer is freed once every stream
      // has passed.
      if (device_->has_own_streams()) {
        v.value_ = v.value_.clone();
      } else {
        v.make_unique_locked();
      }
      data_ = static_cast<float*>(v.value_.raw_mutable_data());
      break;
    case LockingMode::kSnapshot: {
      std::shared_ptr<Event> written;
      const std::shared_ptr<const Tensor> current = v.current_version(written);
      wait_for_write(device_, written);
      next_ = current->clone();
      data_ = static_cast<float*>(next_.raw_mutable_data());
      break;
    }
    case LockingMode::kAtomic:
      cas_ = true;
      [[fallthrough]];
    case LockingMode::kNone:
    case LockingMode::kDataflow:
      shared_ = true;
      data_ = static_cast<float*>(v.value_.raw_mutable_data());
      break;
  }
}

void Variable::Update::apply_scheduled(std::int64_t i, FunctionRef<float(float)> f) const {
  AccessPoint at{.access = Access::kLoad, .location = data_ + i, .variable = &v_, .index = i};
  std::atomic_ref<float> cell(data_[i]);
  schedule_point(at);
  float old = cell.load(std::memory_order_relaxed);
  schedule_result(old);
  if (cas_) {
    at.access = Access::kCompareAndSwap;
    for (;;) {
      const float next = f(old);
      schedule_point(at);
      // Strong: a spurious failure would make the schedule's outcome depend on more than its order.
      const bool swapped = cell.compare_exchange_strong(old, next, std::memory_order_relaxed);
      schedule_result(swapped ? next : old, swapped);
      if (swapped) return;
    }
  }
  const float next = f(old);
  at.access = Access::kStore;
  schedule_point(at);
  cell.store(next, std::memory_order_relaxed);
  schedule_result(next);
}

Variable::Update::~Update() {
  // The event after this write's kernel, for the next reader or writer on another stream. A device that
  // cannot record one has failed, which its next wait reports; a destructor must not throw it.
  std::shared_ptr<Event> written;
  if (!shared_ && device_->has_own_streams()) {
    try {
      written = device_->record_event();
    } catch (...) {
      written = nullptr;
    }
  }
  if (v_.mode_ == LockingMode::kSnapshot) {
    v_.publish(std::make_shared<const Tensor>(std::move(next_)), std::move(written));
  } else if (!shared_) {
    v_.written_ = std::move(written);
  }
  if (!shared_) v_.writes_.fetch_add(1, std::memory_order_release);
  v_.unlock_for_mode(lock_);
}

}  // namespace tctl
