// Variable: named, shared, mutable state; the only mutable state in tensorctl.
//
// Every read and update goes through the variable's LockingMode (core/locking_mode.h):
//   mutex, process  a lock (per variable, or one for the process) held for the whole update; a read shares
//                   the buffer and the next write copies it first, so a read never changes afterwards.
//   snapshot        writers serialize and publish a new immutable version; readers take no lock.
//   atomic          no lock: each element is updated by compare-and-swap, so no update is lost, but a read
//                   copies element by element and may mix old and new values (a torn read).
//   none, dataflow  no lock: each element is a relaxed load, compute, relaxed store, so concurrent updates
//                   are lost (defined C++, silent under ThreadSanitizer). `dataflow` relies on the graph to
//                   order its updates.
// Thread-safe in the sense each mode promises: any thread may read or update any variable.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "core/errors.h"
#include "core/function_ref.h"
#include "core/locking_mode.h"
#include "core/schedule_point.h"
#include "core/tensor.h"

namespace tctl {

class Variable {
 public:
  Variable(std::string name, Tensor initial, LockingMode mode = LockingMode::kMutex, bool trainable = true);
  Variable(const Variable&) = delete;
  Variable& operator=(const Variable&) = delete;

  const std::string& name() const { return name_; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  bool trainable() const { return trainable_; }
  LockingMode locking_mode() const { return mode_; }
  // True for the modes that update one shared buffer without a lock (none, atomic, dataflow).
  bool lock_free() const;

  // The current value as a Tensor that never changes afterwards (in atomic and none modes it may be torn).
  Tensor read() const;

  // Writes finished so far, counted in the modes whose reads are snapshots (mutex, process, snapshot). A
  // reader that still holds what read(writes) gave it may use it again while this count is unchanged: no
  // write has finished since, and a write never changes a buffer a reader holds (it copies it first, or
  // publishes a new version).
  std::uint64_t writes() const { return writes_.load(std::memory_order_acquire); }
  // Whether `held`, read when the count was `writes`, is still the current value: never in the lock-free
  // modes, whose reads are not snapshots. In snapshot mode a write publishes its version before it counts,
  // so two reads in between carry one count and different values: there the version itself is compared.
  bool holds_current(const Tensor& held, std::uint64_t writes) const;
  // read() and the write count its value reflects (never newer than the value; an older count only makes
  // the caller read again). Not for the lock-free modes, whose reads are not snapshots.
  Tensor read(std::uint64_t& writes) const;

  // Where the current value's buffer is, for a caller that names it by address (a recorded device graph
  // checks the variable has not moved); never dereferenced.
  const void* buffer_address() const { return locked_value().raw_data(); }
  // Makes the buffer the variable's alone, copying it first where a reader still holds it, as a write in
  // the mutex and process modes does: work recorded to write the buffer in place (a device graph) may then
  // run without breaking a reader's promise that its value never changes. Nothing in the other modes.
  void own_buffer();
  // The device holding the value; the CPU until placement moves it.
  Device* device() const;
  // Moves the value to `device`, where the nodes that read and update it run (placement colocates them);
  // nothing when it is there already. Values assigned later are copied there.
  void place_on(Device* device);

  void assign(const Tensor& value);
  void assign_add(const Tensor& delta);
  void assign_sub(const Tensor& delta);

  // Write access for a kernel that updates the variable (an optimizer step), for as long as it lives.
  // It holds the mode's lock, if any. Elements are changed with apply(i, f), which sets element i to
  // f(old) the way the mode promises: under the lock, by compare-and-swap, or by a plain load and store.
  class Update {
   public:
    explicit Update(Variable& v);
    ~Update();
    Update(const Update&) = delete;
    Update& operator=(const Update&) = delete;

    std::int64_t size() const { return size_; }
    // Direct access to a buffer this update owns alone; null in the lock-free modes.
    float* data() const { return shared_ ? nullptr : data_; }
    // The buffer being written, in every mode, on the variable's device: what a device kernel updates.
    // In the lock-free modes others write it at the same time (a kernel for `atomic` must add atomically).
    float* device_data() const { return data_; }
    bool lock_free() const { return shared_; }
    bool compare_and_swap() const { return cas_; }

    template <class F>
    void apply(std::int64_t i, F f) const {
      if (plain_) {
        data_[i] = f(data_[i]);
        return;
      }
      if (scheduled_) {
        apply_scheduled(i, f);
        return;
      }
      std::atomic_ref<float> cell(data_[i]);
      if (cas_) {
        float old = cell.load(std::memory_order_relaxed);
        while (!cell.compare_exchange_weak(old, f(old), std::memory_order_relaxed)) {
        }
        return;
      }
      const float old = cell.load(std::memory_order_relaxed);
      cell.store(f(old), std::memory_order_relaxed);
    }

   private:
    void init();  // the constructor's work after the lock
    // apply() on a thread that a StepScheduler drives (core/schedule_point.h): the same loads, stores and
    // compare-and-swaps, each a schedule point.
    void apply_scheduled(std::int64_t i, FunctionRef<float(float)> f) const;

    Variable& v_;
    std::unique_lock<std::mutex> lock_;
    Device* device_ = nullptr;  // where the value lives, for ordering the write across own streams
    Tensor next_;               // the version being written, in snapshot mode
    float* data_ = nullptr;
    std::int64_t size_ = 0;
    bool shared_ = false;
    bool cas_ = false;
    bool scheduled_ = false;  // the thread has a StepScheduler: decided once, not per element
    bool plain_ = false;      // neither shared nor scheduled: apply's one test on the hot path
  };

 private:
  // The lock the mode takes for an update or a locked read (none for the lock-free modes), and its release.
  std::unique_lock<std::mutex> lock_for_mode() const;
  void unlock_for_mode(std::unique_lock<std::mutex>& lock) const;
  void make_unique_locked();
  // Held while value_'s handle is read or replaced outside an update: the mode's lock, or mu_ in the
  // lock-free modes (whose updates take none; there it excludes only another holder).
  class HandleLock {
   public:
    explicit HandleLock(const Variable& v);
    ~HandleLock();
    HandleLock(const HandleLock&) = delete;
    HandleLock& operator=(const HandleLock&) = delete;

   private:
    const Variable& v_;
    std::unique_lock<std::mutex> mode_lock_;
    std::unique_lock<std::mutex> own_;
  };
  // value_'s handle, read under a HandleLock.
  Tensor locked_value() const;
  // Across a device's own streams (Device::own_stream): in the locked modes, makes the calling thread's
  // next work there wait for the last write to the value it reads or replaces (`written`: written_, or the
  // published version's event). Nothing while no thread holds an own stream.
  static void wait_for_write(Device* device, const std::shared_ptr<Event>& written);
  void add_scaled(const Tensor& delta, float sign);

  std::string name_;
  Shape shape_;
  DType dtype_;
  LockingMode mode_;
  bool trainable_;
  mutable std::mutex mu_;
  // mutex, process: the value, replaced on write while a read shares it. Lock-free modes: the one buffer,
  // never replaced, whose elements are accessed atomically.
  Tensor value_ TCTL_GUARDED_BY(mu_);
  // snapshot: the published version. Its own small lock guards only the pointer, never a copy or a write,
  // so a reader waits at most for a pointer swap.
  mutable std::mutex version_mu_;
  std::shared_ptr<const Tensor> version_ TCTL_GUARDED_BY(version_mu_);
  // The event after the kernel that wrote version_ when it was written on a device with own streams (null
  // otherwise), published with it.
  std::shared_ptr<Event> version_written_ TCTL_GUARDED_BY(version_mu_);
  std::shared_ptr<const Tensor> current_version() const;
  std::shared_ptr<const Tensor> current_version(std::shared_ptr<Event>& written) const;
  void publish(std::shared_ptr<const Tensor> next, std::shared_ptr<Event> written = nullptr);
  // mutex, process: the event after the last write's kernel when it was queued while the device had own
  // streams (null otherwise); under the mode's lock.
  std::shared_ptr<Event> written_;
  // Where the value lives; changed only by place_on, under the mode's lock.
  std::atomic<Device*> device_{cpu_device()};
  // Counted at the end of each update, under the mode's lock, after the new value is in place.
  std::atomic<std::uint64_t> writes_{0};
};

}  // namespace tctl
