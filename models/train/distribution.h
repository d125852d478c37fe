// DistributionStrategy: how a Model's training step is spread. One replica (single), replicas in this process
// (mirrored), one replica per MPI worker (multi-worker), or threads sharing one replica (hogwild). The Model
// keeps the network, its graphs and its own replica's session; the strategy keeps everything else a step
// needs: the replicas beyond the first, the threads that run them, the collective, the rows each one takes,
// the counts and the stop votes (docs/data-parallel.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/collective.h"
#include "core/profiler.h"
#include "core/session.h"
#include "core/thread_pool.h"
#include "models/infer/inference.h"
#include "models/nn/sequential.h"
#include "models/train/optimizer.h"

namespace tctl {

struct ModelOptions;

// A traced graph with its feeds and fetches and the session that runs it.
struct TracedStep {
  std::shared_ptr<Graph> graph;
  TracedPass pass;
  std::unique_ptr<Session> session;
};

// One replica as a strategy runs it: its network, optimizer and traced training step.
struct ReplicaHandle {
  Sequential* net = nullptr;
  Optimizer* optimizer = nullptr;
  TracedStep* step = nullptr;
};

// Traces one more replica's training step like the model's own, on `device`, all-reducing its gradients as
// member `member`, run by a session on the given pools (Model::trace_replica).
using ReplicaTracer = std::function<TracedStep(const Sequential& net, Optimizer& optimizer, const std::string& device,
                                               int member, ThreadPool& inter, ThreadPool& intra)>;

// What hogwild's updates came to: each worker's update per step expected, and the optimizer's step counter,
// written like the variables in the optimizer's locking mode, counting those that stuck.
// `staleness[k]`: the updates whose worker saw k runs of the others finish (each with its update) while it ran
// its step, so whose gradient was computed from weights up to k updates old. Empty with one worker.
struct HogwildTotals {
  std::int64_t steps = 0;
  std::int64_t expected = 0;
  std::int64_t applied = 0;
  std::vector<std::int64_t> staleness;
};

// What the all-reduces of a mirrored model have cost so far, seen from its first replica.
struct AllReduceTotals {
  std::int64_t steps = 0;  // mirrored training steps
  std::int64_t calls = 0;  // one per bucket per step
  std::int64_t bytes = 0;  // gradient bytes each replica contributed
  double seconds = 0.0;    // from arriving to having the sum, waiting for the other replicas included
};

// One training step as the model asks for it: `batch_rows` > 0 says x and targets hold only
// local_rows(batch_rows) of a batch of that many rows; 0: the whole batch. With `scores` the step returns
// {loss, scores}, else {loss} (the metrics' scores need not leave the device).
struct StepRequest {
  const Tensor& x;
  const Tensor& targets;
  std::int64_t step = 0;
  std::int64_t batch_rows = 0;
  Profiler* profiler = nullptr;
  bool scores = true;
  // Gradient accumulation: where the step stands in its update (applies it, or only adds to the sums).
  AccumulationStep accumulation;
};

class DistributionStrategy {
 public:
  virtual ~DistributionStrategy() = default;

  // Known before the model traces its own replica: the collective its gradients are all-reduced over (null:
  // none) and its member there.
  virtual std::shared_ptr<Collective> collective() const { return nullptr; }
  virtual int first_member() const { return 0; }
  // Once the model's own replica is traced: the other replicas made from `more_nets` (the mirrored one's),
  // each traced by `trace`; the threads started.
  virtual void start(ReplicaHandle first, const ReplicaTracer& trace,
                     std::vector<std::shared_ptr<Sequential>> more_nets);

  // This process's replicas, and the replicas in all (every worker's; hogwild's workers).
  virtual int replicas() const { return 1; }
  virtual int members() const { return 1; }
  // Replica r's network (0: the model's own).
  virtual const Sequential& replica_net(int r) const;
  // Makes every replica hold the first one's variables and optimizer state (Model::sync_replicas).
  virtual void sync_replicas() {}
  // One training step: {mean loss, metric scores} (the scores only when asked), on the host. Throws
  // NonFiniteError when an update refused a gradient that is not finite.
  virtual std::vector<Tensor> step(const StepRequest& request) = 0;
  // The rows of a batch of `batch_rows` rows that this process's replicas take, as {first, count}.
  virtual std::pair<std::int64_t, std::int64_t> local_rows(std::int64_t batch_rows) const { return {0, batch_rows}; }
  // Whether a step feeds the model's own session the whole batch as given (Model::input_device applies).
  virtual bool feeds_whole_batch() const { return true; }
  // The stop flag (Ctrl-C, SIGTERM; borrowed, may be null), and whether to stop after the last step.
  virtual void set_stop_flag(const std::atomic<bool>* flag) { stop_flag_ = flag; }
  virtual bool stop_requested() const { return stop_flag_set(); }
  virtual AllReduceTotals all_reduce_totals() const { return {}; }
  virtual HogwildTotals hogwild_totals() const { return {}; }

 protected:
  bool stop_flag_set() const { return stop_flag_ != nullptr && stop_flag_->load(std::memory_order_relaxed); }
  ReplicaHandle first_;

 private:
  const std::atomic<bool>* stop_flag_ = nullptr;
};

// The strategy ModelOptions ask for, for a model of `nets` networks (one per mirrored replica).
std::unique_ptr<DistributionStrategy> make_distribution_strategy(const ModelOptions& options, std::size_t nets);
// The four, each in its own file: one replica; options.replica_devices.size() replicas in this process; this
// process as member `worker` of `workers`; `threads` sharing one replica (one: plain steps, counted).
std::unique_ptr<DistributionStrategy> single_strategy();
std::unique_ptr<DistributionStrategy> mirrored_strategy(const ModelOptions& options);
std::unique_ptr<DistributionStrategy> multi_worker_strategy(std::shared_ptr<Collective> workers, int worker);
std::unique_ptr<DistributionStrategy> hogwild_strategy(int threads);

// Threads of a pool for each of `replicas`: as asked, or with 0 (one per core) the cores shared out.
int threads_per_replica(int asked, std::size_t replicas);

// The model's own replica run on a whole batch, as a single replica's step: its optimizer's step begun.
std::vector<Tensor> run_whole_batch(ReplicaHandle replica, const StepRequest& request);

}  // namespace tctl
