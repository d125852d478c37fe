// ThreadPool: a fixed set of worker threads fed from one queue. The inter-op pool runs graph nodes; the
// intra-op pool splits the work inside one kernel.
//
// A pool of size N means N threads work at once: N-1 workers plus the thread that calls parallel_for,
// which does its share instead of idling. Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/errors.h"
#include "core/function_ref.h"

namespace tctl {

class ThreadPool {
 public:
  // `threads` >= 1; 0 means one per hardware thread. With `ignore_grain` (for tests), parallel_for cuts every
  // range of two or more indices over all threads whatever its grain, so small inputs take the parallel path
  // and a comparison of thread counts compares something.
  explicit ThreadPool(int threads, bool ignore_grain = false);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Threads working at once, the caller included.
  int size() const { return size_; }
  int num_workers() const { return static_cast<int>(workers_.size()); }

  // Runs `task` on a worker. Tasks must not throw and must not block on other tasks of this pool.
  void schedule(std::function<void()> task);

  // Runs one queued task on the calling thread, if there is one; returns whether it did. A thread that
  // waits for the pool's work (the executor's caller) helps with it instead of idling.
  bool try_run_one();
  // Whether tasks are queued, without taking the lock.
  bool has_pending() const { return queued_.load(std::memory_order_acquire) > 0; }

  // Calls fn(begin, end) on disjoint blocks covering [0, n), spread over the pool and the calling thread,
  // and returns when all are done. Blocks hold at least `grain` indices. fn must give each index the same
  // result however the range is cut; that is what keeps results independent of thread counts. An
  // exception from fn is rethrown here, in the caller.
  void parallel_for(std::int64_t n, std::int64_t grain, FunctionRef<void(std::int64_t, std::int64_t)> fn);

  // The number of hardware threads, at least 1.
  static int hardware_threads();

 private:
  void worker_loop();
  // Stops and joins every worker; the pool runs nothing after.
  void stop_workers();

  int size_;
  std::vector<std::thread> workers_;
  bool ignore_grain_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_ TCTL_GUARDED_BY(mu_);
  bool stopping_ TCTL_GUARDED_BY(mu_) = false;
  // Tasks queued, readable without the lock so idle workers can spin on it before they sleep.
  std::atomic<int> queued_{0};
  int sleeping_ TCTL_GUARDED_BY(mu_) = 0;
};

// Sets flush-to-zero and denormals-are-zero for the calling thread (see issue 6: denormal Adam moments
// made the update pass four times slower). Called by every thread that runs kernels. Returns whether it
// was on before.
bool set_flush_denormals(bool on);

// Whether the threads that run kernels flush denormals: on unless switched off for the whole process,
// before any model is built (`tensorctl train --keep-denormals`, to compare results with and without).
void set_denormal_flushing(bool enabled);
bool denormal_flushing();

// Gives the calling thread the process's setting: what a pool worker, or a thread taking a handed-off
// node, does before it runs kernels. Returns whether the thread flushed before.
inline bool apply_denormal_setting() { return set_flush_denormals(denormal_flushing()); }

// Flushes denormals on the calling thread while it lives and restores the thread's setting after. Every
// caller that runs kernels holds one, so the thread a node happens to run on never changes its result.
class FlushDenormalsScope {
 public:
  FlushDenormalsScope() : was_on_(apply_denormal_setting()) {}
  ~FlushDenormalsScope() { set_flush_denormals(was_on_); }
  FlushDenormalsScope(const FlushDenormalsScope&) = delete;
  FlushDenormalsScope& operator=(const FlushDenormalsScope&) = delete;

 private:
  bool was_on_;
};

}  // namespace tctl
