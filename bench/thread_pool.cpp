// Thread pools compared: tensorctl's ThreadPool against Eigen's ThreadPool (the one TensorFlow uses), on
// the two patterns tensorctl needs: a parallel_for split into a few blocks (intra-op), and a burst of small
// scheduled tasks (inter-op hand-off). Prints microseconds per call, median of 7 repetitions.
#define EIGEN_USE_THREADS
#include <unsupported/Eigen/CXX11/ThreadPool>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <vector>

#include <fmt/format.h>

#include "core/thread_pool.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class Fn>
double time_per_call(int calls, Fn fn) {
  std::vector<double> reps;
  for (int r = 0; r < 8; ++r) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) fn();
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / calls;
    if (r > 0) reps.push_back(us);
  }
  return median(reps);
}

// The work of one block: enough arithmetic that the split is worth doing.
void work(std::vector<float>& data, std::int64_t begin, std::int64_t end) {
  for (std::int64_t i = begin; i < end; ++i)
    data[static_cast<std::size_t>(i)] = data[static_cast<std::size_t>(i)] * 0.999f + 0.5f;
}

}  // namespace

int main() {
  const int threads = 2;
  const std::int64_t n = 65536;
  std::vector<float> data(static_cast<std::size_t>(n), 1.0f);
  tctl::ThreadPool ours(threads);
  Eigen::ThreadPool eigen(threads - 1);  // like ours: workers plus the calling thread

  double ours_pf = time_per_call(
      2000, [&] { ours.parallel_for(n, 4096, [&](std::int64_t b, std::int64_t e) { work(data, b, e); }); });
  double eigen_pf = time_per_call(2000, [&] {
    // Eigen's pool has no parallel_for of its own; Eigen::Barrier is how its users wait for a split.
    Eigen::Barrier barrier(1);
    eigen.Schedule([&] {
      work(data, n / 2, n);
      barrier.Notify();
    });
    work(data, 0, n / 2);
    barrier.Wait();
  });
  double serial = time_per_call(2000, [&] { work(data, 0, n); });

  const int burst = 64;
  double ours_burst = time_per_call(500, [&] {
    std::atomic<int> left{burst};
    for (int i = 0; i < burst; ++i) ours.schedule([&] { left.fetch_sub(1); });
    while (left.load() > 0) std::this_thread::yield();
  });
  double eigen_burst = time_per_call(500, [&] {
    std::atomic<int> left{burst};
    for (int i = 0; i < burst; ++i) eigen.Schedule([&] { left.fetch_sub(1); });
    while (left.load() > 0) std::this_thread::yield();
  });

  fmt::print("thread pools, {} threads (median of 7)\n", threads);
  fmt::print("{:<44} {:>10} {:>10}\n", "pattern", "tensorctl", "Eigen");
  fmt::print("{:<44} {:>9.2f}us {:>9.2f}us   (serial {:.2f}us)\n", "parallel_for over 64K floats, 2 blocks", ours_pf,
             eigen_pf, serial);
  fmt::print("{:<44} {:>9.3f}us {:>9.3f}us\n", "64 tiny scheduled tasks, per task", ours_burst / burst,
             eigen_burst / burst);
  return 0;
}
