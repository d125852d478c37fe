// Model: a built Sequential with its training and inference graphs, its optimizer and the sessions that
// run them; one training or evaluation step, forward and predict. The loop around the steps (epochs,
// batches, metrics, callbacks) is the Trainer's (models/train/trainer.h).
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/collective.h"
#include "core/eager.h"
#include "core/profiler.h"
#include "core/session.h"
#include "core/thread_pool.h"
#include "models/data/dataset.h"
#include "models/nn/losses.h"
#include "models/nn/sequential.h"
#include "models/train/metric_accumulator.h"
#include "models/train/optimizer.h"

namespace tctl {

struct ModelOptions {
  // Empty: no loss, an inference-only model (one replica, no metrics): the inference graph holds the
  // predictions alone, and nothing may train or evaluate it (a model spec profiled without a loss).
  std::string loss = "sparse_categorical_crossentropy";
  OptimizerConfig optimizer;
  std::vector<std::string> metrics;  // "accuracy" for classification; "mae", "mse" for regression
  int inter_op_threads = 0;          // 0: one per core
  int intra_op_threads = 0;
  std::string device = "cpu";
  // GPU products may use TF32 (set process-wide when the model is made: the backend flag "allow_tf32", core/device.h).
  bool allow_tf32 = false;
  std::uint64_t seed = 0;
  std::string config_file;  // names the file in errors about the loss or metrics
  // Order stateful ops on one variable by control edges (off only to show what they prevent).
  bool auto_control_dependencies = true;
  // Training batches a producer thread prepares ahead through a FIFOQueue; 0 prepares each inline.
  std::int64_t prefetch = 2;
  // Batches of fewer bytes (inputs and targets) are gathered inline even with prefetch: handing a batch to
  // the loop through the queues (a wake-up each way) costs more than copying a small one. 0: always prefetch.
  std::int64_t prefetch_min_bytes = std::int64_t{256} << 10;
  // Strict placement, and the log of where every node runs (core/placement.h).
  PlacementOptions placement;
  // A hook between "gradients computed" and "updates applied": given each trainable variable's gradient,
  // returns the gradients the optimizer applies (same order and shapes). Empty: applied as they are. With
  // data parallelism it sees the gradients already all-reduced (the model's own all-reduce, in buckets of
  // `bucket_bytes`, runs before it).
  std::function<std::vector<Output>(Graph&, std::span<const std::shared_ptr<Variable>>, std::vector<Output>)>
      combine_gradients;
  // Mirrored data parallelism (train config "strategy": {"type": "mirrored"}): two or more entries make one
  // replica per entry, on that device, each with its own copy of the variables and optimizer state. A
  // training step splits the batch between them; their gradients are all-reduced, weighted by each one's
  // share of the rows, in buckets of up to `bucket_bytes` (fused, one exchange per bucket, issued in the
  // same order by every replica), and every replica applies the same update. Empty: one replica on `device`.
  std::vector<std::string> replica_devices;
  std::int64_t bucket_bytes = std::int64_t{4} << 20;
  // Multi-worker (strategy "multi-worker"): this process is member `worker` of `workers`, one replica per
  // process (an MPI job's world, core/mpi_world.h), each worker running its share of the batch. Every worker
  // must call train_batch with the same batches and steps, and sync_replicas at the same points.
  std::shared_ptr<Collective> workers;
  int worker = 0;
  // Hogwild (strategy "hogwild"): two or more threads share this one replica, its session and variables; a
  // step gives each its share of the rows, and each applies its own update as the optimizer's `locking`
  // lets it (with none, updates may be lost). No all-reduce. One worker takes plain steps, counted alike.
  int hogwild_workers = 0;
};

// What hogwild's updates came to: each worker's update per step expected, and the optimizer's step counter,
// written like the variables in the optimizer's locking mode, counting those that stuck.
struct HogwildTotals {
  std::int64_t steps = 0;
  std::int64_t expected = 0;
  std::int64_t applied = 0;
};

// What the all-reduces of a mirrored model have cost so far, seen from its first replica.
struct AllReduceTotals {
  std::int64_t steps = 0;  // mirrored training steps
  std::int64_t calls = 0;  // one per bucket per step
  std::int64_t bytes = 0;  // gradient bytes each replica contributed
  double seconds = 0.0;    // from arriving to having the sum, waiting for the other replicas included
};

double metric(const MetricValues& values, const std::string& name);

class Model {
 public:
  // Builds the graphs. Throws SpecError (naming options.config_file) when the loss or a metric does not
  // suit the model.
  Model(std::shared_ptr<Sequential> net, ModelOptions options);
  // A mirrored model: nets[r] is replica r's network, built alike (same spec); nets[0] is net(). Needs one
  // net per entry of options.replica_devices. The replicas start from nets[0]'s values (sync_replicas).
  Model(std::vector<std::shared_ptr<Sequential>> nets, ModelOptions options);
  ~Model();

  // 1, or the mirrored replicas of this process.
  int replicas() const { return static_cast<int>(others_.size()) + 1; }
  // The replicas in all: this process's, or with multi-worker every worker's; with hogwild, its workers.
  int members() const { return members_; }
  // Replica r's network (0: net()).
  const Sequential& replica_net(int r) const;
  // Copies the first replica's variables and optimizer state into the others, which are otherwise written
  // only by the steps: after a checkpoint was restored into net() and optimizer(). With multi-worker, rank 0's
  // values go to every rank (an all-reduce: every worker calls it at the same point). No-op with one replica.
  void sync_replicas();
  AllReduceTotals all_reduce_totals() const;
  HogwildTotals hogwild_totals() const;
  // The stop flag (Ctrl-C, SIGTERM; borrowed, may be null) and whether to stop after the last training step:
  // the flag's value, or with multi-worker whether any rank's flag was set when its step began, learnt from
  // the all-reduce of the step's results. So every rank stops after the same step: a rank that stopped on
  // its own would leave the others waiting for it in the next all-reduce until the stall timeout.
  void set_stop_flag(const std::atomic<bool>* flag) {
    stop_flag_ = flag;
    stop_agreed_ = false;
  }
  bool stop_requested() const;

  // One training step on a batch: the optimizer's updates run. Returns {mean loss, metric scores}, on the
  // host: the scores are what the metrics read (LossOutputs::scores: the logits under a softmax output, else
  // the predictions). Mirrored: every replica runs its share of the rows at once; the loss is the replicas'
  // losses weighted by their shares, the scores theirs in row order, for all `batch_rows` rows.
  // `batch_rows` > 0 says x and targets hold only local_rows(batch_rows) of a batch of that many rows (a
  // worker reads its own share); 0: they hold the whole batch.
  // Throws NonFiniteError when an update refused a gradient that is not finite (nothing was written).
  std::vector<Tensor> train_batch(const Tensor& x, const Tensor& targets, std::int64_t step,
                                  std::int64_t batch_rows = 0);
  // The rows of a training batch of `batch_rows` rows that this process's replicas take, as {first, count}:
  // with multi-worker this worker's share (at least one row: a worker left without rows runs one with weight
  // 0), else all of them.
  std::pair<std::int64_t, std::int64_t> local_rows(std::int64_t batch_rows) const;
  // One evaluation step with the inference graph: {per-example loss, metric scores}.
  std::vector<Tensor> eval_batch(const Tensor& x, const Tensor& targets);
  // Predictions for every row of x ([N, ...input_shape]), computed in batches.
  Tensor predict(const Tensor& x, std::int64_t batch_size);

  // The first replica's network and optimizer (the others hold the same values after every step).
  const Sequential& net() const { return *net_; }
  const ModelOptions& options() const { return options_; }
  const Optimizer& optimizer() const { return optimizer_; }
  // For callbacks between steps: set_lr_factor (reduce-on-plateau).
  Optimizer& optimizer() { return optimizer_; }
  // Nodes that cannot run where they ask and run on the CPU instead, one line each ("dense/MatMul: device
  // cuda:0 is not available (...), running on cpu"); known from construction, before any step.
  const std::vector<std::string>& placement_warnings() const { return placement_warnings_; }
  const Graph& training_graph() const {
    TCTL_CHECK(train_graph_ != nullptr, "a model without a loss has no training graph");
    return *train_graph_;
  }
  const Graph& inference_graph() const { return *infer_graph_; }
  // Runs one training step on a batch; returns the loss. For benchmarks and tests.
  // With a profiler, the run's node events are recorded into it.
  float train_step(const Tensor& x, const Tensor& targets, std::int64_t step, Profiler* profiler = nullptr);
  // One inference pass on a batch (the forward-only profile), on the first replica.
  Tensor forward_step(const Tensor& x, Profiler* profiler = nullptr);
  // The same two, eagerly (core/eager.h): every op runs as the model calls it, one after another, with no
  // graph to plan or overlap. Same seed and step, same numbers as the traced step. A mirrored model's eager
  // step is one replica's on the whole batch (no all-reduce), writing the first replica only.
  float eager_train_step(const Tensor& x, const Tensor& targets, std::int64_t step, Profiler* profiler = nullptr);
  Tensor eager_forward_step(const Tensor& x, Profiler* profiler = nullptr);
  // Replays a training step eagerly without its updates and names the first op whose output is not finite
  // (for the message when a step goes NaN).
  std::string find_non_finite(const Tensor& x, const Tensor& targets, std::int64_t step);
  // Where a training step's input batch is used: the one device other than the CPU that every use of x in
  // the training graph is placed on (a copy takes it there), or nullptr (the CPU, several devices, a
  // mirrored or hogwild model). A batch fed already on it skips the trip to the host: the fit loop's
  // producer thread moves each prefetched batch there while the step before runs.
  Device* input_device() const { return input_device_; }
  // The batch feeds for rows of a data set, in the form the loss expects.
  Tensor targets_for(const Dataset& data, std::span<const std::int64_t> rows) const;
  // targets_for, reusing `buffer` when nobody else holds it (steady-state steps allocate nothing).
  Tensor targets_into(const Dataset& data, std::span<const std::int64_t> rows, Tensor& buffer) const;

 private:
  // Adds the lines not already noted.
  void note_placement_warnings(const std::vector<std::string>& more);
  // Hogwild's counts (hogwild_totals): the step counter read before the first step, and one worker's plain
  // step counted as a step of one update.
  void begin_hogwild_step();
  void end_single_hogwild_step();
  struct Pass;     // one traced graph's inputs and outputs
  struct Replica;  // replicas 1.. of a mirrored model; the first is the Model's own members
  struct Traced;   // what tracing one replica's step needs: its net, optimizer, device and member
  class ReplicaThreads;
  // The forward pass and loss into `g`; with training, the layers' training behaviour (dropout).
  void trace_forward(Graph& g, Pass& pass, bool training, const Traced& r) const;
  // The forward pass, loss, gradients and optimizer updates of one training step into `g`; when r.member >= 0,
  // the gradients are all-reduced across the replicas first.
  void trace_training(Graph& g, Pass& pass, const Traced& r);
  Traced first_replica(int member);
  // The all-reduce of one replica's gradients, in buckets (ModelOptions::bucket_bytes).
  std::vector<Output> all_reduce_gradients(Graph& g, std::vector<Output> grads, const Pass& pass, int member) const;
  // One training step of a mirrored (in-process or multi-worker) or hogwild model, which train_batch and
  // train_step hand over to: {weighted mean loss, metric scores}.
  std::vector<Tensor> mirrored_step(const Tensor& x, const Tensor& targets, std::int64_t step, Profiler* profiler,
                                    std::int64_t batch_rows = 0);
  struct Share;  // one member's rows of a mirrored step, and what its run gave
  // The batch's rows per member, gathered for this process's runs (replicas, or hogwild's workers).
  std::vector<Share> split_batch(const Tensor& x, const Tensor& targets, std::int64_t batch);
  // Runs this process's replicas (or hogwild's workers) on their shares, each filling its `out`; rethrows the
  // first failure, after putting the replicas back in step with each other.
  void run_replicas(std::vector<Share>& shares, std::int64_t step, Profiler* profiler);
  // {weighted mean loss, metric scores} of the step, across workers through an all-reduce.
  std::vector<Tensor> step_results(const std::vector<Share>& shares, std::int64_t batch, std::int64_t step,
                                   bool stop_vote);
  void average_moving_statistics(std::int64_t step, const std::function<float(int)>& weight);
  // trace_training run eagerly on one batch; returns the loss.
  float eager_training(const Tensor& x, const Tensor& targets, const EagerOptions& options);

  std::shared_ptr<Sequential> net_;
  ModelOptions options_;
  Optimizer optimizer_;
  ThreadPool inter_pool_;
  ThreadPool intra_pool_;
  std::shared_ptr<Graph> train_graph_;
  std::shared_ptr<Graph> infer_graph_;
  std::unique_ptr<Pass> train_pass_;
  std::unique_ptr<Pass> infer_pass_;
  std::unique_ptr<Session> train_session_;
  std::unique_ptr<Session> infer_session_;
  Device* input_device_ = nullptr;
  // Replicas 1.. of an in-process mirrored model.
  std::vector<std::unique_ptr<Replica>> others_;
  std::vector<std::string> placement_warnings_;  // each once, in the order found
  // The collective of a mirrored model's replicas (in-process: group_) or of the workers, else null; the
  // members in all (with hogwild, its workers), and the member of this process's first replica.
  std::shared_ptr<Collective> collective_;
  std::shared_ptr<CollectiveGroup> group_;
  int members_ = 1;
  int first_member_ = 0;
  std::int64_t syncs_ = 0;
  std::unique_ptr<ReplicaThreads> threads_;
  Tensor scores_;  // a mirrored step's metric scores, gathered from the replicas (reused)
  // A mirrored step's rows per run (replica or hogwild worker): {x, targets} buffers reused from step to
  // step, and the row numbers 0 .. batch - 1 they are gathered by.
  std::vector<std::array<Tensor, 2>> share_buffers_;
  std::vector<std::int64_t> row_numbers_;
  // Multi-worker with more than one member in all: the steps all-reduce across processes.
  bool multi_worker() const { return options_.workers && members_ > 1; }
  const std::atomic<bool>* stop_flag_ = nullptr;
  bool stop_agreed_ = false;  // multi-worker: a rank's stop flag was set at a step's start
  std::int64_t mirrored_steps_ = 0;
  int hogwild_ = 0;  // hogwild's workers (1: plain steps, counted as hogwild's), or 0
  std::int64_t hogwild_updates_ = 0;
  double hogwild_counter_start_ = 0.0;  // the step counter before the first hogwild step
};

}  // namespace tctl
