// Model: a built Sequential with its training and inference graphs, its optimizer and the sessions that
// run them; one training or evaluation step, forward and predict. The loop around the steps (epochs,
// batches, metrics, callbacks) is the Trainer's (models/train/trainer.h).
#pragma once

#include <atomic>
#include <functional>
#include <map>
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
#include "models/infer/inference.h"
#include "models/infer/metrics.h"
#include "models/io/safetensors.h"
#include "models/nn/losses.h"
#include "models/nn/sequential.h"
#include "models/train/distribution.h"
#include "models/train/optimizer.h"

namespace tctl {

// What a Model is made with: its inference graph's options (the loss, metrics, device, seed, placement; an
// empty loss makes an inference-only model: one replica, no metrics, nothing may train or evaluate it), and
// how it trains.
struct ModelOptions : InferenceOptions {
  ModelOptions() { loss = "sparse_categorical_crossentropy"; }
  OptimizerConfig optimizer;
  int inter_op_threads = 0;  // 0: one per core
  int intra_op_threads = 0;
  // Order stateful ops on one variable by control edges (off only to show what they prevent).
  bool auto_control_dependencies = true;
  // Training batches a producer thread prepares ahead through a FIFOQueue; 0 prepares each inline.
  std::int64_t prefetch = 2;
  // Batches of fewer bytes (inputs and targets) are gathered inline even with prefetch: handing a batch to
  // the loop through the queues (a wake-up each way) costs more than copying a small one. 0: always prefetch.
  std::int64_t prefetch_min_bytes = std::int64_t{256} << 10;
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
  // Keras' class_weight: each row's training loss times its class's weight (validation and test stay
  // unweighted); empty: none. One weight per class (class_weight_count); set_class_weights changes them.
  std::vector<float> class_weights;
};

// How many class weights a model with `loss` and outputs `output` takes: its outputs for the categorical
// cross-entropies, 2 for binary cross-entropy on one output; 0 where class weights do not apply.
std::int64_t class_weight_count(const std::string& loss, const Shape& output);

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
  int replicas() const { return strategy_->replicas(); }
  // The replicas in all: this process's, or with multi-worker every worker's; with hogwild, its workers.
  int members() const { return strategy_->members(); }
  // Replica r's network (0: net()).
  const Sequential& replica_net(int r) const { return strategy_->replica_net(r); }
  // Copies the first replica's variables and optimizer state into the others, which are otherwise written
  // only by the steps: after a checkpoint was restored into net() and optimizer(). With multi-worker, rank 0's
  // values go to every rank (an all-reduce: every worker calls it at the same point). No-op with one replica.
  void sync_replicas() { strategy_->sync_replicas(); }
  AllReduceTotals all_reduce_totals() const { return strategy_->all_reduce_totals(); }
  HogwildTotals hogwild_totals() const { return strategy_->hogwild_totals(); }
  // The stop flag (Ctrl-C, SIGTERM; borrowed, may be null) and whether to stop after the last training step:
  // the flag's value, or with multi-worker whether any rank's flag was set when its step began, learnt from
  // the all-reduce of the step's results. So every rank stops after the same step: a rank that stopped on
  // its own would leave the others waiting for it in the next all-reduce until the stall timeout.
  void set_stop_flag(const std::atomic<bool>* flag) { strategy_->set_stop_flag(flag); }
  bool stop_requested() const { return strategy_->stop_requested(); }

  // One training step on a batch: the optimizer's updates run. Returns {mean loss, metric scores}, on the
  // host: the scores are what the metrics read (LossOutputs::scores: the logits under a softmax output, else
  // the predictions). Mirrored: every replica runs its share of the rows at once; the loss is the replicas'
  // losses weighted by their shares, the scores theirs in row order, for all `batch_rows` rows.
  // `batch_rows` > 0 says x and targets hold only local_rows(batch_rows) of a batch of that many rows (a
  // worker reads its own share); 0: they hold the whole batch.
  // Throws NonFiniteError when an update refused a gradient that is not finite (nothing was written).
  // `accumulation`: where the step stands in its update (gradient accumulation; the default applies it).
  std::vector<Tensor> train_batch(const Tensor& x, const Tensor& targets, std::int64_t step,
                                  std::int64_t batch_rows = 0, const AccumulationStep& accumulation = {});
  // The rows of a training batch of `batch_rows` rows that this process's replicas take, as {first, count}:
  // with multi-worker this worker's share (at least one row: a worker left without rows runs one with weight
  // 0), else all of them.
  std::pair<std::int64_t, std::int64_t> local_rows(std::int64_t batch_rows) const {
    return strategy_->local_rows(batch_rows);
  }
  // One evaluation step with the inference graph: {per-example loss, metric scores}.
  std::vector<Tensor> eval_batch(const Tensor& x, const Tensor& targets) { return inference_->eval_batch(x, targets); }
  // Predictions for every row of x ([N, ...input_shape]), computed in batches.
  Tensor predict(const Tensor& x, std::int64_t batch_size) { return inference_->predict(x, batch_size); }
  // The inference graph and its session (validation, predict, the forward-only profile).
  Inference& inference() { return *inference_; }

  // Device graph segments the training step has replayed so far (ModelOptions::device_graphs; the first
  // replica's session).
  std::uint64_t training_graph_replays() const {
    return train_.session != nullptr ? train_.session->device_graph_replays() : 0;
  }
  // The first replica's network and optimizer (the others hold the same values after every step).
  const Sequential& net() const { return *net_; }
  const ModelOptions& options() const { return options_; }
  const Optimizer& optimizer() const { return optimizer_; }
  // For callbacks between steps: set_lr_factor (reduce-on-plateau).
  Optimizer& optimizer() { return optimizer_; }

  // Replaces the class weights (ModelOptions::class_weights, same count) of every replica's training step.
  void set_class_weights(std::span<const float> weights);

  // The optimizer's use_ema: the weights a run shows (validation, test) and keeps (saved weights, best
  // weights) are the moving averages, while training goes on from the weights themselves. Whether the
  // averages stand in now: use_ema, after the first update, before finalize_averages.
  bool averages_stand_in() const;
  // net()'s variable values, each trainable one's average in its place while averages_stand_in().
  std::vector<NamedTensor> kept_weights() const;
  // Swaps the first replica's trainable weights with their averages while averages_stand_in(), and back
  // when called again; pairs of calls around an evaluation (Trainer::evaluate).
  void swap_averages();
  // Keras' finalize_variable_values: the weights become their averages, for good (after the last step and
  // checkpoint of a run). No-op without use_ema.
  void finalize_averages();
  // Nodes that cannot run where they ask and run on the CPU instead, one line each ("dense/MatMul: device
  // cuda:0 is not available (...), running on cpu"); known from construction, before any step.
  const std::vector<std::string>& placement_warnings() const { return placement_warnings_; }
  const Graph& training_graph() const {
    TCTL_CHECK(train_.graph != nullptr, "a model without a loss has no training graph");
    return *train_.graph;
  }
  const Graph& inference_graph() const { return inference_->graph(); }
  // Runs one training step on a batch; returns the loss. For benchmarks and tests.
  // With a profiler, the run's node events are recorded into it.
  float train_step(const Tensor& x, const Tensor& targets, std::int64_t step, Profiler* profiler = nullptr);
  // One inference pass on a batch (the forward-only profile), on the first replica.
  Tensor forward_step(const Tensor& x, Profiler* profiler = nullptr) { return inference_->forward_step(x, profiler); }
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
  Tensor targets_for(const Dataset& data, std::span<const std::int64_t> rows) const {
    Tensor buffer;
    return targets_into(data, rows, buffer);
  }
  // targets_for, reusing `buffer` when nobody else holds it (steady-state steps allocate nothing).
  Tensor targets_into(const Dataset& data, std::span<const std::int64_t> rows, Tensor& buffer) const {
    return inference_->targets_into(data, rows, buffer);
  }

 private:
  // Adds the lines not already noted.
  void note_placement_warnings(const std::vector<std::string>& more);
  struct Traced;  // what tracing one replica's step needs: its net, optimizer, device and member
  // The forward pass, loss, gradients and optimizer updates of one training step into `g`; when r.member >= 0,
  // the gradients are all-reduced across the replicas first.
  void trace_training(Graph& g, TracedPass& pass, const Traced& r);
  // With class weights: the training loss becomes the mean of each row's loss times its class's weight.
  void weigh_classes(Graph& g, TracedPass& pass, const Traced& r);
  Traced first_replica(int member);
  // Another replica's training step, traced like the first (the strategy's ReplicaTracer).
  TracedStep trace_replica(const Sequential& net, Optimizer& optimizer, const std::string& device, int member,
                           ThreadPool& inter, ThreadPool& intra);
  // The all-reduce of one replica's gradients, in buckets (ModelOptions::bucket_bytes).
  std::vector<Output> all_reduce_gradients(Graph& g, std::vector<Output> grads, const TracedPass& pass,
                                           const Traced& r);
  SessionOptions session_options() const;
  // trace_training run eagerly on one batch; returns the loss.
  float eager_training(const Tensor& x, const Tensor& targets, const EagerOptions& options);

  std::shared_ptr<Sequential> net_;
  ModelOptions options_;
  Optimizer optimizer_;
  ThreadPool inter_pool_;
  ThreadPool intra_pool_;
  // The model's own replica's training step (none in a model without a loss), and the inference graph.
  TracedStep train_;
  std::unique_ptr<Inference> inference_;
  Device* input_device_ = nullptr;
  std::vector<std::string> placement_warnings_;  // each once, in the order found
  bool averages_final_ = false;
  // Each replica's class weights (ModelOptions::class_weights), by its network; read by its training step.
  std::map<const Sequential*, std::shared_ptr<Variable>> class_weights_;
  // Last, so its threads are stopped before the sessions they run go.
  std::unique_ptr<DistributionStrategy> strategy_;
};

}  // namespace tctl
