// Model: a built Sequential with its training and inference graphs, its optimizer and the sessions that
// run them; one training or evaluation step, forward and predict. The loop around the steps (epochs,
// batches, metrics, callbacks) is the Trainer's (models/train/trainer.h).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

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
  std::string loss = "sparse_categorical_crossentropy";
  OptimizerConfig optimizer;
  std::vector<std::string> metrics;  // "accuracy" for classification; "mae", "mse" for regression
  int inter_op_threads = 0;          // 0: one per core
  int intra_op_threads = 0;
  std::string device = "cpu";
  // GPU products may use TF32 (set process-wide when the model is made: core/device.h set_allow_tf32).
  bool allow_tf32 = false;
  std::uint64_t seed = 0;
  std::string config_file;  // names the file in errors about the loss or metrics
  // Order stateful ops on one variable by control edges (off only to show what they prevent).
  bool auto_control_dependencies = true;
  // Training batches a producer thread prepares ahead through a FIFOQueue; 0 prepares each inline.
  std::int64_t prefetch = 2;
  // Strict placement, and the log of where every node runs (core/placement.h).
  PlacementOptions placement;
  // The one place between "gradients computed" and "updates applied": given each trainable variable's
  // gradient, returns the gradients the optimizer applies (same order and shapes). Empty: applied as they
  // are. Data-parallel training puts its all-reduce here, so every replica applies the same update.
  std::function<std::vector<Output>(Graph&, std::span<const std::shared_ptr<Variable>>, std::vector<Output>)>
      combine_gradients;
};

double metric(const MetricValues& values, const std::string& name);

class Model {
 public:
  // Builds the graphs. Throws SpecError (naming options.config_file) when the loss or a metric does not
  // suit the model.
  Model(std::shared_ptr<Sequential> net, ModelOptions options);
  ~Model();

  // One training step on a batch: the optimizer's updates run. Returns {mean loss, predictions}, on the host.
  // Throws NonFiniteError when an update refused a gradient that is not finite (nothing was written).
  std::vector<Tensor> train_batch(const Tensor& x, const Tensor& targets, std::int64_t step);
  // One evaluation step with the inference graph: {per-example loss, predictions}.
  std::vector<Tensor> eval_batch(const Tensor& x, const Tensor& targets);
  // Predictions for every row of x ([N, ...input_shape]), computed in batches.
  Tensor predict(const Tensor& x, std::int64_t batch_size);

  const Sequential& net() const { return *net_; }
  const ModelOptions& options() const { return options_; }
  const Optimizer& optimizer() const { return optimizer_; }
  // For callbacks between steps: set_lr_factor (reduce-on-plateau).
  Optimizer& optimizer() { return optimizer_; }
  // Nodes that could not run where they asked and fell back to the CPU, so far.
  std::vector<std::string> placement_warnings() const;
  const Graph& training_graph() const { return *train_graph_; }
  const Graph& inference_graph() const { return *infer_graph_; }
  // Runs one training step on a batch; returns the loss. For benchmarks and tests.
  // With a profiler, the run's node events are recorded into it.
  float train_step(const Tensor& x, const Tensor& targets, std::int64_t step, Profiler* profiler = nullptr);
  // One inference pass on a batch (the forward-only profile).
  Tensor forward_step(const Tensor& x, Profiler* profiler = nullptr);
  // The same two, eagerly (core/eager.h): every op runs as the model calls it, one after another, with no
  // graph to plan or overlap. Same seed and step, same numbers as the traced step.
  float eager_train_step(const Tensor& x, const Tensor& targets, std::int64_t step, Profiler* profiler = nullptr);
  Tensor eager_forward_step(const Tensor& x, Profiler* profiler = nullptr);
  // Replays a training step eagerly without its updates and names the first op whose output is not finite
  // (for the message when a step goes NaN).
  std::string find_non_finite(const Tensor& x, const Tensor& targets, std::int64_t step);
  // The batch feeds for rows of a data set, in the form the loss expects.
  Tensor targets_for(const Dataset& data, std::span<const std::int64_t> rows) const;
  // targets_for, reusing `buffer` when nobody else holds it (steady-state steps allocate nothing).
  Tensor targets_into(const Dataset& data, std::span<const std::int64_t> rows, Tensor& buffer) const;

 private:
  struct Pass;  // one traced graph's inputs and outputs
  // The forward pass and loss into `g`; with training, the layers' training behaviour (dropout).
  void trace_forward(Graph& g, Pass& pass, bool training) const;
  // The forward pass, loss, gradients and optimizer updates of one training step into `g`.
  void trace_training(Graph& g, Pass& pass);
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
};

}  // namespace tctl
