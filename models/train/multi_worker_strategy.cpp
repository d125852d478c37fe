// Multi-worker: this process is one member of an MPI job's world (core/mpi_world.h), one replica per process,
// each running its share of every batch. Gradients are all-reduced in the training graph; the step's loss and
// scores, the moving statistics, the stop votes and sync_replicas go through the same collective, so every
// worker must take the same steps and call sync_replicas at the same points.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "models/train/split_step.h"

namespace tctl {
namespace {

class MultiWorkerStrategy final : public SplitStepStrategy {
 public:
  MultiWorkerStrategy(std::shared_ptr<Collective> workers, int worker)
      : SplitStepStrategy(workers->members(), worker), workers_(std::move(workers)) {
    TCTL_CHECK(first_member_ >= 0 && first_member_ < members_, "worker out of range");
  }

  std::shared_ptr<Collective> collective() const override { return workers_; }

  // This worker's share (at least one row: a worker left without rows runs one with weight 0), else all.
  std::pair<std::int64_t, std::int64_t> local_rows(std::int64_t batch_rows) const override {
    TCTL_CHECK(batch_rows >= 1, "local_rows of an empty batch");
    if (!across_processes()) return {0, batch_rows};
    const std::int64_t begin = first_row_of_member(batch_rows, members_, first_member_);
    const std::int64_t end = first_row_of_member(batch_rows, members_, first_member_ + 1);
    if (end > begin) return {begin, end - begin};
    return {std::min(begin, batch_rows - 1), 1};
  }

  // Rank 0's values to every rank: an all-reduce where rank 0 weighs 1 and the others 0.
  void sync_replicas() override {
    if (!across_processes()) return;
    std::vector<std::shared_ptr<Variable>> vars = first_.net->variables();
    for (auto& v : first_.optimizer->state()) vars.push_back(std::move(v));
    std::vector<float> values = packed_values(vars);
    workers_->all_reduce(first_member_, collective_key(syncs_++, kSyncInstance), values.data(),
                         static_cast<std::int64_t>(values.size()), first_member_ == 0 ? 1.0f : 0.0f, values.data(),
                         "the weights of rank 0");
    assign_packed(vars, values);
  }

  // Whether any rank's flag was set when its step began, learnt from the all-reduce of the step's results:
  // so every rank stops after the same step. A rank that stopped on its own would leave the others waiting
  // for it in the next all-reduce until the stall timeout.
  void set_stop_flag(const std::atomic<bool>* flag) override {
    DistributionStrategy::set_stop_flag(flag);
    stop_agreed_ = false;
  }
  bool stop_requested() const override { return across_processes() ? stop_agreed_ : stop_flag_set(); }

  AllReduceTotals all_reduce_totals() const override {
    const Collective::Stats s = workers_->stats(first_member_);
    return {steps_, s.calls, s.elements * static_cast<std::int64_t>(sizeof(float)), s.seconds};
  }

 private:
  bool across_processes() const { return members_ > 1; }
  ReplicaHandle run_handle(int /*r*/) const override { return first_; }

  // The moving statistics (see mirrored_strategy.cpp): the workers' values weighted by their rows, summed by
  // an all-reduce in member order.
  void end_runs(const std::vector<Share>& shares, std::int64_t step) override {
    const std::vector<std::shared_ptr<Variable>> vars = moving_statistics(*first_.net);
    if (vars.empty()) return;
    std::vector<float> mean = packed_values(vars);
    workers_->all_reduce(first_member_, collective_key(step, kStatisticsInstance), mean.data(),
                         static_cast<std::int64_t>(mean.size()), shares[static_cast<std::size_t>(first_member_)].weight,
                         mean.data(), "the moving statistics at step " + std::to_string(step));
    assign_packed(vars, mean);
  }

  // The results all-reduced: each worker's rows' scores where they belong, zeros elsewhere, then its loss
  // term and its vote to stop (the sum says whether any voted).
  std::vector<Tensor> results(const std::vector<Share>& shares, std::int64_t batch, std::int64_t step,
                              bool stop_vote) override {
    if (!across_processes()) return SplitStepStrategy::results(shares, batch, step, stop_vote);
    const Share& own = shares[static_cast<std::size_t>(first_member_)];
    const Tensor& p0 = own.out[1];
    Tensor& scores = scores_of(Shape::concat(batch, p0.shape().without_batch()));
    const std::int64_t width = p0.num_elements() / p0.shape()[0];
    std::vector<float> results(static_cast<std::size_t>(batch * width + 2), 0.0f);
    if (own.rows > 0) std::memcpy(results.data() + own.begin * width, p0.data<float>(), p0.bytes());
    float& loss = results[static_cast<std::size_t>(batch * width)];
    float& stop_votes = results.back();
    loss = loss_term(own);
    stop_votes = stop_vote ? 1.0f : 0.0f;
    workers_->all_reduce(first_member_, collective_key(step, kResultsInstance), results.data(),
                         static_cast<std::int64_t>(results.size()), 1.0f, results.data(),
                         "the results at step " + std::to_string(step));
    std::memcpy(scores.mutable_data<float>(), results.data(), scores.bytes());
    stop_agreed_ = stop_agreed_ || stop_votes > 0.0f;
    return {Tensor::scalar(loss / static_cast<float>(batch)), scores};
  }

  std::shared_ptr<Collective> workers_;
  std::int64_t syncs_ = 0;
  bool stop_agreed_ = false;
};

}  // namespace

std::unique_ptr<DistributionStrategy> multi_worker_strategy(std::shared_ptr<Collective> workers, int worker) {
  return std::make_unique<MultiWorkerStrategy>(std::move(workers), worker);
}

}  // namespace tctl
