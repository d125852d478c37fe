// Trainer: the fit loop around a Model. It shuffles and batches the data, prefetches batches on a producer
// thread, runs the model's training and evaluation steps, sums the loss and metrics, reports epochs and
// steps to callbacks, replays a step gone NaN to name the op that began it, and stops on request (early
// stopping) or on the interrupt flag (Ctrl-C). The Model keeps the network, its graphs and its steps.
//
// Not thread-safe: one thread drives a Trainer (its producer thread is its own business).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "models/data/dataset.h"
#include "models/infer/metrics.h"
#include "models/record/training_state.h"
#include "models/train/model.h"

namespace tctl {

// Where an interrupted fit() stopped: `epoch` (1-based) is the epoch to continue, with `steps_done` of its
// steps already taken, `sums` the loss and metric sums of those steps and `skipped_steps` the updates of
// those steps that dynamic loss scaling skipped (hogwild's workers make several a step), so the epoch's row
// counts them all.
struct FitPosition {
  std::int64_t epoch = 1;
  std::int64_t steps_done = 0;
  BatchSums sums;
  std::int64_t skipped_steps = 0;
};

// How a call that trains some of an epoch's steps reports them: after `before` others, of `total` (0: of the
// call's own).
struct StepReport {
  std::int64_t before = 0, total = 0;
};

class Trainer {
 public:
  // Borrows the model, which must outlive the trainer.
  explicit Trainer(Model& model);
  ~Trainer();

  using EpochCallback = std::function<void(const EpochResult&)>;
  // Called after every step with the running averages of the epoch so far.
  using StepCallback = std::function<void(std::int64_t step, std::int64_t steps, const MetricValues& running)>;

  // Trains for epochs [start.epoch, epochs], shuffling the training rows each epoch with the model's seed.
  // The first `start.steps_done` steps of start.epoch are taken as done (a run resumed from a mid-epoch
  // checkpoint) and `start.sums` as their sums, so that epoch's row is the whole epoch's, bit for bit what
  // a run that never stopped reports. start.steps_done must be below the steps of an epoch.
  std::vector<EpochResult> fit(const Dataset& train, const Dataset* validation, std::int64_t epochs,
                               std::int64_t batch_size, const EpochCallback& on_epoch = {},
                               const StepCallback& on_step = {}, const FitPosition& start = {});
  // Loss and metrics over every row of `data`, in batches, with the inference graph.
  MetricValues evaluate(const Dataset& data, std::int64_t batch_size);

  // fit() checks `flag` after every step and returns, with the step in progress finished, once it is true
  // (a SIGINT or SIGTERM handler sets it). The trainer and its model borrow the flag: with multi-worker,
  // the ranks agree to stop at the same step (Model::stop_requested).
  void set_interrupt_flag(const std::atomic<bool>* flag) { model_.set_stop_flag(flag); }
  // Set when the last fit() returned because of the interrupt flag.
  const std::optional<FitPosition>& interrupted_at() const { return interrupted_at_; }
  // Called from an epoch callback: fit() returns after this epoch (early stopping).
  void stop_training() { stop_after_epoch_ = true; }
  // Whether fit() returns every epoch's row (the default) or none: a caller that takes the rows from
  // on_epoch keeps memory flat however many epochs run (`--epochs 99999999999` grew by 12 MB/s).
  void set_keep_history(bool keep) { keep_history_ = keep; }

  Model& model() { return model_; }
  // The seconds the training loop has waited for its batches, over every fit() so far: with prefetch, for a
  // batch the producer had not finished; without, the gathering itself. Against the epochs' time it says
  // whether the data path keeps up with the step (summary.json's "input").
  double input_wait_seconds() const { return input_wait_seconds_; }

 private:
  // Trains on the batches of `order` and returns `start` plus their sums. Stops early, after a step, when the
  // interrupt flag is set (steps_run_ says how many ran).
  // on_step hears of the steps as `report` says (StepReport).
  BatchSums run_batches(const Dataset& data, std::span<const std::int64_t> order, std::int64_t batch_size,
                        std::int64_t first_step, const BatchSums& start, const StepCallback& on_step,
                        StepReport report = {});
  // One epoch of `train` (in memory, or a stream a window at a time), its first `skip` steps taken as done
  // with `start` their sums; returns the epoch's sums, steps_run_ the steps it took.
  BatchSums run_epoch(const Dataset& train, std::int64_t epoch, std::int64_t batch_size, std::int64_t skip,
                      const BatchSums& start, const StepCallback& on_step);
  // The model's training step on the batch of `rows` of `data`, x and y holding the whole batch or
  // Model::local_rows of it; a step gone NaN becomes a RuntimeError naming where, and the op that began it.
  std::vector<Tensor> run_step(const Tensor& x, const Tensor& y, std::int64_t step, const Dataset& data,
                               std::span<const std::int64_t> rows);
  // "epoch E, step S (step N of the run)" for messages.
  std::string where(std::int64_t step) const;

  class WindowFeed;
  Model& model_;
  std::unique_ptr<WindowFeed> feed_;  // a streamed fit's training windows (trainer.cpp)
  std::optional<FitPosition> interrupted_at_;
  bool stop_after_epoch_ = false;
  std::int64_t steps_run_ = 0;  // steps the last run_batches call took
  double input_wait_seconds_ = 0.0;
  std::int64_t current_epoch_ = 1;
  std::int64_t steps_per_epoch_ = 0;
  std::int64_t epoch_rows_ = 0;  // the training rows of an epoch
  std::int64_t batch_size_ = 1;
  bool keep_history_ = true;
};

}  // namespace tctl
