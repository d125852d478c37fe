// Inference: a network's inference graph (its forward pass and, with a loss, the per-example loss and the
// metrics' scores) and the session that runs it; predict, one evaluation batch, and evaluate over a data set.
// It knows nothing of training: no gradients, optimizer or replicas. predict and evaluate load a run into one
// (models/run), and a training Model keeps one for its validation (models/train/model.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/compute_type.h"
#include "core/placement.h"
#include "core/profiler.h"
#include "core/session.h"
#include "core/thread_pool.h"
#include "models/data/dataset.h"
#include "models/infer/metrics.h"
#include "models/nn/sequential.h"

namespace tctl {

// The feeds and fetches of one traced graph: the inference pass, or a replica's training step.
struct TracedPass {
  Output x;
  Output targets;
  Output predictions;
  Output scores;       // what the metrics read (LossOutputs::scores)
  Output loss;         // scalar mean
  Output per_example;  // [batch]
  Output weight;       // data-parallel training: this replica's share of the batch's rows (a float scalar)
  std::vector<Output> updates;
  // With gradient accumulation, the targets of a step that only adds to the sums (Optimizer::apply).
  std::vector<Output> accumulates;
};

struct InferenceOptions {
  // Empty: no loss, the predictions alone (a model spec profiled without a loss).
  std::string loss;
  std::vector<std::string> metrics;  // "accuracy" for classification; "mae", "mse" for regression
  std::string device = "cpu";
  // GPU products may use TF32 (set process-wide: the backend flag "allow_tf32", core/device.h).
  bool allow_tf32 = false;
  std::uint64_t seed = 0;
  std::string config_file;  // names the file in errors about the loss or metrics
  PlacementOptions placement;
  // Record each device's part of a step once and replay it (SessionOptions::device_graphs).
  bool device_graphs = false;
  // The type the products read their operands in: the precision policy's (models/record/precision.h).
  ComputeType compute_type = ComputeType::kF32;
};

// Throws SpecError (naming options.config_file, "metrics[i]") when a metric does not apply to the loss.
void check_metrics(const InferenceOptions& options);

// The forward pass of `net` on `device` into `g` and, with a loss, the loss; `training`: the layers' training
// behaviour (dropout). Throws SpecError (naming options.config_file, "loss") when the loss does not suit the
// network's output.
void trace_forward(Graph& g, TracedPass& pass, const Sequential& net, bool training, const std::string& device,
                   const InferenceOptions& options);

class Inference {
 public:
  // Traces the inference graph and places it (a device strict placement refuses throws here); runs it on the
  // given pools, or on pools of its own with those thread counts (0: one per core).
  Inference(std::shared_ptr<const Sequential> net, InferenceOptions options, ThreadPool& inter, ThreadPool& intra);
  Inference(std::shared_ptr<const Sequential> net, InferenceOptions options, int inter_op_threads = 0,
            int intra_op_threads = 0);
  ~Inference();

  const Sequential& net() const { return *net_; }
  const InferenceOptions& options() const { return options_; }
  const Graph& graph() const { return *graph_; }
  // Nodes that cannot run where they ask and run on the CPU instead, one line each.
  const std::vector<std::string>& placement_warnings() const { return placement_warnings_; }

  // One evaluation batch: {per-example loss, metric scores}.
  std::vector<Tensor> eval_batch(const Tensor& x, const Tensor& targets);
  // Predictions for every row of x ([N, ...input_shape]), computed in batches.
  Tensor predict(const Tensor& x, std::int64_t batch_size);
  // One inference pass on a batch (the forward-only profile).
  Tensor forward_step(const Tensor& x, Profiler* profiler = nullptr);
  // The batch feeds for rows of a data set, in the form the loss expects, reusing `buffer` when nobody else
  // holds it (steady-state steps allocate nothing).
  Tensor targets_into(const Dataset& data, std::span<const std::int64_t> rows, Tensor& buffer) const;
  // Loss and metrics over every row of `data` (scaled and shaped for the network), in batches of `batch_size`.
  MetricValues evaluate(const Dataset& data, std::int64_t batch_size);
  // The loss and metric sums of evaluate over `data` in memory (a streamed data set's window).
  BatchSums evaluate_sums(const Dataset& data, std::int64_t batch_size);

 private:
  Inference(std::shared_ptr<const Sequential> net, InferenceOptions options, std::unique_ptr<ThreadPool> inter,
            std::unique_ptr<ThreadPool> intra);
  void build(ThreadPool& inter, ThreadPool& intra);

  std::shared_ptr<const Sequential> net_;
  InferenceOptions options_;
  std::unique_ptr<ThreadPool> own_inter_, own_intra_;  // when made without pools
  std::shared_ptr<Graph> graph_;
  TracedPass pass_;
  std::unique_ptr<Session> session_;
  std::vector<std::string> placement_warnings_;
};

}  // namespace tctl
