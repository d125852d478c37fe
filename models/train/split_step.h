// SplitStepStrategy: what mirrored, multi-worker and hogwild training share. A batch's rows are split evenly
// between the members, this process's runs (its replicas, or hogwild's worker threads) take their shares at
// once, and the step's loss and scores are gathered from what they gave.
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/errors.h"
#include "models/train/distribution.h"

namespace tctl {

// The threads of runs 1..n-1, kept for the model's life: run() hands each its part of a step and returns
// when every part is done, run 0 on the caller's thread meanwhile.
class RunThreads {
 public:
  explicit RunThreads(int runs);
  ~RunThreads();
  RunThreads(const RunThreads&) = delete;
  RunThreads& operator=(const RunThreads&) = delete;

  // fn(r) for every run r; fn must not throw.
  void run(const std::function<void(int)>& fn);

 private:
  void loop(int r);

  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* fn_ TCTL_GUARDED_BY(mu_) = nullptr;
  int left_ TCTL_GUARDED_BY(mu_) = 0;
  std::uint64_t generation_ TCTL_GUARDED_BY(mu_) = 0;
  bool stop_ TCTL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

// One member's rows of a step, and what its run gave. A member left without rows (a last batch smaller than
// the members) runs the first row it was fed with weight 0, so it still meets the others in the all-reduce
// and adds nothing.
struct Share {
  std::int64_t begin = 0, rows = 0;
  float weight = 0.0f;
  Tensor x, targets;
  std::vector<Tensor> out;
  std::exception_ptr error;
};

class SplitStepStrategy : public DistributionStrategy {
 public:
  int first_member() const override { return first_member_; }
  int members() const override { return members_; }
  bool feeds_whole_batch() const override { return false; }
  std::vector<Tensor> step(const StepRequest& request) override;

 protected:
  SplitStepStrategy(int members, int first_member) : members_(members), first_member_(first_member) {}
  // This process's runs (its replicas, or hogwild's workers), and what run r runs.
  virtual int runs() const { return replicas(); }
  virtual ReplicaHandle run_handle(int r) const = 0;
  // Before the runs start: the optimizers' step begun.
  virtual void begin_runs(const StepRequest& request) {
    first_.optimizer->begin_step(request.step, request.accumulation);
  }
  // After every run returned without error.
  virtual void end_runs(const std::vector<Share>& /*shares*/, std::int64_t /*step*/) {}
  // After a run failed, every run returned, before the first failure is rethrown.
  virtual void after_failure() {}
  // On run r's thread, just before its session runs and just after it returned without error.
  virtual void run_starts(int /*r*/) {}
  virtual void run_ended(int /*r*/) {}
  // {weighted mean loss, metric scores}: the members' mean losses weighted by their rows, their scores in row
  // order. Here from this process's shares; multi-worker's across processes.
  virtual std::vector<Tensor> results(const std::vector<Share>& shares, std::int64_t batch, std::int64_t step,
                                      bool stop_vote);
  // The scores tensor of a step's `shape`, reused from step to step while nobody else holds it.
  Tensor& scores_of(const Shape& shape);
  // A share's term of the step's loss: its mean loss times its rows.
  static float loss_term(const Share& s) { return s.rows > 0 ? s.out[0].item() * static_cast<float>(s.rows) : 0.0f; }

  const int members_;
  const int first_member_;
  std::int64_t steps_ = 0;  // training steps taken
  std::unique_ptr<RunThreads> threads_;

 private:
  // The batch's rows per member, gathered for this process's runs.
  std::vector<Share> split_batch(const Tensor& x, const Tensor& targets, std::int64_t batch);
  // Runs this process's runs on their shares, each filling its `out`; rethrows the first failure.
  void run_shares(std::vector<Share>& shares, const StepRequest& request);

  Tensor scores_;
  // Each run's rows: {x, targets} buffers reused from step to step, and the row numbers they are gathered by.
  std::vector<std::array<Tensor, 2>> share_buffers_;
  std::vector<std::int64_t> row_numbers_;
};

// The first row of member m's share of a batch split evenly between `members`, the first ones taking one more
// where they do not divide; member `members` gives the batch's end.
std::int64_t first_row_of_member(std::int64_t batch, std::int64_t members, std::int64_t m);

// Variables' values packed into one float vector, and written back from one.
std::vector<float> packed_values(const std::vector<std::shared_ptr<Variable>>& vars);
void assign_packed(const std::vector<std::shared_ptr<Variable>>& vars, const std::vector<float>& values);
// The variables a step writes without a gradient (BatchNormalization's moving statistics).
std::vector<std::shared_ptr<Variable>> moving_statistics(const Sequential& net);

// The instances of the all-reduces a step makes besides its gradient buckets (0, 1, ...).
constexpr std::int64_t kResultsInstance = kMaxCollectiveInstances - 1;     // every replica's loss and scores
constexpr std::int64_t kStatisticsInstance = kMaxCollectiveInstances - 2;  // the moving statistics
constexpr std::int64_t kSyncInstance = kMaxCollectiveInstances - 3;        // sync_replicas across workers

}  // namespace tctl
