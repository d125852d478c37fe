#include "core/thread_pool.h"

#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <system_error>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "core/ceil_div.h"

namespace tctl {
namespace {

inline void pause() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// How long an idle thread spins before it sleeps, by the clock: a pause lasts several times longer on one
// processor than on another, so a count of them spins for a time nobody chose. Waking a thread that sleeps
// on a condition variable is slow on virtual machines once its core has gone idle, and a parallel call whose
// worker slept waits that long for the worker's half; the spin outlasts a wake-up several times over.
// Measured by bench_workloads mlp784_b128 at 2 threads (bench/README.md, "Figures behind the constants in
// the code").
constexpr auto kSpinTime = std::chrono::microseconds(200);

// Spins until done() or kSpinTime has passed, reading the clock every 16 pauses.
template <class Done>
inline void spin_until(Done done) {
  const auto until = std::chrono::steady_clock::now() + kSpinTime;
  for (;;) {
    for (int i = 0; i < 16; ++i) {
      if (done()) return;
      pause();
    }
    if (std::chrono::steady_clock::now() >= until) return;
  }
}

}  // namespace

int ThreadPool::hardware_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int threads, bool ignore_grain)
    : size_(threads <= 0 ? hardware_threads() : threads), ignore_grain_(ignore_grain) {
  try {
    for (int i = 1; i < size_; ++i) workers_.emplace_back([this] { worker_loop(); });
  } catch (const std::system_error& e) {
    // The system refused a thread (its limit on threads or memory): the ones started are stopped and joined
    // here, as no destructor runs for a pool that was never made, and the run fails with one line.
    const std::size_t started = workers_.size();
    stop_workers();
    throw RuntimeError("cannot start a pool of " + std::to_string(size_) + " threads: the system refused thread " +
                       std::to_string(started + 2) + " (" + e.code().message() + ")");
  } catch (...) {
    stop_workers();  // memory for a thread's state or the vector ran out: the same clean-up
    throw;
  }
}

void ThreadPool::stop_workers() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::schedule(std::function<void()> task) {
  TCTL_CHECK(!workers_.empty(), "schedule() on a pool without workers");
  bool wake;
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(task));
    queued_.fetch_add(1, std::memory_order_release);
    wake = sleeping_ > 0;
  }
  if (wake) cv_.notify_one();
}

bool ThreadPool::try_run_one() {
  std::function<void()> task;
  {
    std::lock_guard lock(mu_);
    if (queue_.empty()) return false;
    task = std::move(queue_.front());
    queue_.pop_front();
    queued_.fetch_sub(1, std::memory_order_relaxed);
  }
  task();
  return true;
}

// Waking a sleeping thread costs several microseconds here, more than many kernels take, so an idle
// worker first spins a little on the queue counter before it sleeps on the condition variable.
void ThreadPool::worker_loop() {
  apply_denormal_setting();
  for (;;) {
    spin_until([this] { return queued_.load(std::memory_order_acquire) != 0; });
    std::function<void()> task;
    {
      std::unique_lock lock(mu_);
      if (queue_.empty()) {
        ++sleeping_;
        cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        --sleeping_;
      }
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      queued_.fetch_sub(1, std::memory_order_relaxed);
    }
    task();
  }
}

namespace {
// Shared by the caller and the helpers of one parallel_for. Helpers may start after the caller has
// returned; they then find no block left and never touch fn, which lives on the caller's stack.
struct ParallelState {
  std::atomic<std::int64_t> next{0};
  std::atomic<std::int64_t> done{0};
  std::int64_t blocks = 0;
  std::int64_t block_size = 0;
  std::int64_t n = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::exception_ptr error;
  const FunctionRef<void(std::int64_t, std::int64_t)>* fn = nullptr;

  void run_blocks() {
    for (;;) {
      std::int64_t b = next.fetch_add(1, std::memory_order_relaxed);
      if (b >= blocks) return;
      std::int64_t begin = b * block_size;
      std::int64_t end = std::min(n, begin + block_size);
      try {
        (*fn)(begin, end);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!error) error = std::current_exception();
      }
      if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == blocks) {
        std::lock_guard lock(mu);
        cv.notify_all();
      }
    }
  }
};
}  // namespace

void ThreadPool::parallel_for(std::int64_t n, std::int64_t grain, FunctionRef<void(std::int64_t, std::int64_t)> fn) {
  if (n <= 0) return;
  grain = ignore_grain_ ? 1 : std::max<std::int64_t>(grain, 1);
  std::int64_t max_blocks = ceil_div(n, grain);
  std::int64_t blocks = std::min<std::int64_t>(size_, max_blocks);
  if (blocks <= 1) {
    fn(0, n);
    return;
  }
  auto state = std::make_shared<ParallelState>();
  state->n = n;
  state->block_size = ceil_div(n, blocks);
  state->blocks = ceil_div(n, state->block_size);
  state->fn = &fn;
  for (std::int64_t i = 1; i < state->blocks; ++i) schedule([state] { state->run_blocks(); });
  state->run_blocks();
  // The helpers' blocks usually end within microseconds of the caller's: spin on the counter for a while
  // before sleeping, since a futex wake-up alone costs several microseconds here.
  spin_until([&] { return state->done.load(std::memory_order_acquire) == state->blocks; });
  if (state->done.load(std::memory_order_acquire) != state->blocks) {
    std::unique_lock lock(state->mu);
    state->cv.wait(lock, [&] { return state->done.load(std::memory_order_acquire) == state->blocks; });
  }
  if (state->error) std::rethrow_exception(state->error);
}

namespace {
std::atomic<bool> g_denormal_flushing{true};
}  // namespace

void set_denormal_flushing(bool enabled) { g_denormal_flushing.store(enabled, std::memory_order_relaxed); }
bool denormal_flushing() { return g_denormal_flushing.load(std::memory_order_relaxed); }

bool set_flush_denormals(bool on) {
#if defined(__x86_64__) || defined(__i386__)
  constexpr unsigned kFtz = 0x8000;  // MXCSR flush-to-zero
  constexpr unsigned kDaz = 0x0040;  // MXCSR denormals-are-zero
  const unsigned before = _mm_getcsr();
  const unsigned csr = on ? (before | kFtz | kDaz) : (before & ~(kFtz | kDaz));
  if (csr != before) _mm_setcsr(csr);
  return (before & kFtz) != 0;
#else
  (void)on;
  return false;
#endif
}

}  // namespace tctl
