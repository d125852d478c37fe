// Hogwild: two or more threads share one replica, its session and variables. A step gives each its share of
// the rows, and each applies its own update as the optimizer's `locking` lets it (with none, updates may be
// lost: race-check measures how many). No all-reduce. One worker takes plain steps, counted alike.
#include <atomic>
#include <cmath>
#include <memory>

#include "core/device.h"
#include "models/train/split_step.h"

namespace tctl {
namespace {

class HogwildStrategy final : public SplitStepStrategy {
 public:
  explicit HogwildStrategy(int threads) : SplitStepStrategy(threads, 0) {}

  void start(ReplicaHandle first, const ReplicaTracer& trace,
             std::vector<std::shared_ptr<Sequential>> more_nets) override {
    DistributionStrategy::start(first, trace, std::move(more_nets));
    if (members_ > 1) {
      threads_ = std::make_unique<RunThreads>(members_);
      workers_.resize(static_cast<std::size_t>(members_));
    }
  }
  int replicas() const override { return 1; }
  bool feeds_whole_batch() const override { return members_ == 1; }

  std::vector<Tensor> step(const StepRequest& request) override {
    if (members_ > 1) return SplitStepStrategy::step(request);
    // One worker's plain step is exactly its update.
    begin_counting();
    std::vector<Tensor> out = run_whole_batch(first_, request);
    ++steps_;
    ++updates_;
    return out;
  }

  // The optimizer's step counter, written like the variables, counts the updates that stuck.
  HogwildTotals hogwild_totals() const override {
    HogwildTotals t{steps_, updates_, static_cast<std::int64_t>(std::llround(step_counter() - counter_start_)), {}};
    for (const Worker& w : workers_) {
      if (t.staleness.size() < w.staleness.size()) t.staleness.resize(w.staleness.size());
      for (std::size_t k = 0; k < w.staleness.size(); ++k) t.staleness[k] += w.staleness[k];
    }
    return t;
  }

 private:
  int runs() const override { return members_; }
  ReplicaHandle run_handle(int /*r*/) const override { return first_; }
  void begin_runs(const StepRequest& request) override {
    begin_counting();
    SplitStepStrategy::begin_runs(request);
  }
  void end_runs(const std::vector<Share>& /*shares*/, std::int64_t /*step*/) override { updates_ += members_; }
  // Staleness: the runs finished before a worker's run started and before it ended; the others' are the
  // difference. Counted on the host, not read from the step counter: that read is a device copy and a wait on
  // a GPU, twice a worker a step, and under none the counter itself may lose increments.
  void run_starts(int r) override {
    workers_[static_cast<std::size_t>(r)].finished_at_start = finished_runs_.load(std::memory_order_acquire);
  }
  void run_ended(int r) override {
    Worker& w = workers_[static_cast<std::size_t>(r)];
    const auto k =
        static_cast<std::size_t>(finished_runs_.fetch_add(1, std::memory_order_acq_rel) - w.finished_at_start);
    if (w.staleness.size() <= k) w.staleness.resize(k + 1);
    ++w.staleness[k];
  }

  // Steps counted or, with loss scaling, skipped for overflow: a skipped step's update is not a lost one.
  double step_counter() const { return first_.optimizer->iterations() + first_.optimizer->skipped_steps(); }
  // The step counter before the first step (after any checkpoint was restored into it).
  void begin_counting() {
    if (steps_ == 0) counter_start_ = step_counter();
  }

  std::int64_t updates_ = 0;
  double counter_start_ = 0.0;
  // Each worker's own, written only on its thread during a step and read between steps.
  struct Worker {
    std::int64_t finished_at_start = 0;
    std::vector<std::int64_t> staleness;
  };
  std::vector<Worker> workers_;
  std::atomic<std::int64_t> finished_runs_{0};  // workers' runs that returned, every step so far
};

}  // namespace

std::unique_ptr<DistributionStrategy> hogwild_strategy(int threads) {
  return std::make_unique<HogwildStrategy>(threads);
}

}  // namespace tctl
