// Session: runs a graph. It owns the prepared plans (one per set of feeds, fetches and fed shapes) and
// their reusable frames; it borrows the thread pools. Variables live in the graph's nodes and are shared.
//
// Thread-safe: run() may be called from many threads at once (each call gets its own frame). The graph
// must not change once a session runs it.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/executor.h"
#include "core/graph.h"
#include "core/profiler.h"
#include "core/thread_pool.h"

namespace tctl {

struct Feed {
  Output output;
  Tensor value;
};

struct SessionOptions {
  std::uint64_t seed = 0;
  PlacementOptions placement;
  // Record each device's part of a plan once and replay it (core/device_graph.h) where the device can
  // record; its lines ("device graph: ...") go to placement.log.
  bool device_graphs = false;
  // The type the products read their operands in (core/compute_type.h): a precision policy's.
  ComputeType compute_type = ComputeType::kF32;
};

struct RunOptions {
  // The step number that keys random streams (dropout masks); -1 takes the session's next step.
  std::int64_t step = -1;
  // When set, the run records each kernel execution into it (see core/profiler.h); the session borrows it.
  // One profiler may serve many runs and threads at once.
  Profiler* profiler = nullptr;
  // Rows of the step's global batch before this run's (a data-parallel replica's share): see
  // KernelContext::batch_offset.
  std::int64_t batch_offset = 0;
};

class Session {
 public:
  Session(std::shared_ptr<const Graph> graph, ThreadPool& inter, ThreadPool& intra, SessionOptions options = {});
  ~Session();

  // Computes `fetches` (and runs `targets` for their effects) given `feeds`. Kernel errors are rethrown here.
  std::vector<Tensor> run(std::span<const Feed> feeds, std::span<const Output> fetches,
                          std::span<const Output> targets = {}, const RunOptions& options = {});

  const Graph& graph() const { return *graph_; }

  // Installs this session as the calling thread's default session until the guard is destroyed.
  class DefaultScope {
   public:
    explicit DefaultScope(Session* s);
    ~DefaultScope();
    DefaultScope(const DefaultScope&) = delete;
    DefaultScope& operator=(const DefaultScope&) = delete;

   private:
    Session* previous_;
  };
  [[nodiscard]] DefaultScope as_default() { return DefaultScope(this); }
  // Warnings from placement so far (nodes that fell back to the CPU), without duplicates.
  std::vector<std::string> placement_warnings() const;
  // Device graph segments launched as a replay so far (SessionOptions::device_graphs).
  std::uint64_t device_graph_replays() const { return graph_replays_.load(std::memory_order_relaxed); }

 private:
  struct Prepared;
  Prepared& prepare(std::span<const Feed> feeds, std::span<const Output> fetches, std::span<const Output> targets);
  // Reports each line not reported before through the placement log.
  void log_once(const std::vector<std::string>& lines);

  std::shared_ptr<const Graph> graph_;
  ThreadPool& inter_;
  ThreadPool& intra_;
  SessionOptions options_;
  std::atomic<std::int64_t> next_step_{0};
  std::atomic<std::uint64_t> graph_replays_{0};
  mutable std::mutex mu_;
  // Plans by key (fed nodes with dtype and shape, fetches, targets). A plan lives as long as the session.
  std::map<std::vector<std::int64_t>, std::unique_ptr<Prepared>> plans_ TCTL_GUARDED_BY(mu_);
  // The plan prepared or found last: a run with the same key as the one before takes it without the lock.
  std::atomic<Prepared*> last_{nullptr};
  std::set<std::string> logged_ TCTL_GUARDED_BY(mu_);  // placement lines reported so far
};

// The calling thread's default session, installed by Session::as_default() on this thread. A thread has
// none of its own: asking without one throws GraphError, which says to install the session.
Session& default_session();

}  // namespace tctl
