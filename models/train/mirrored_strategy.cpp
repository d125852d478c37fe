// Mirrored: one replica per entry of ModelOptions::replica_devices, in this process, each with its own copy of
// the variables and optimizer state, its own pools and session. A step splits the batch between them; their
// gradients are all-reduced in the training graph (Model::all_reduce_gradients) and every replica applies the
// same update.
#include <memory>
#include <string>
#include <vector>

#include "models/train/model.h"
#include "models/train/split_step.h"

namespace tctl {
namespace {

// A replica after the first: its own network, optimizer, pools and traced step (whose session uses the pools).
struct Replica {
  Replica(std::shared_ptr<Sequential> n, const OptimizerConfig& config, std::string d, int inter, int intra)
      : net(std::move(n)), optimizer(config), device(std::move(d)), inter_pool(inter), intra_pool(intra) {}
  std::shared_ptr<Sequential> net;
  Optimizer optimizer;
  std::string device;
  ThreadPool inter_pool;
  ThreadPool intra_pool;
  TracedStep step;
};

class MirroredStrategy final : public SplitStepStrategy {
 public:
  explicit MirroredStrategy(const ModelOptions& o)
      : SplitStepStrategy(static_cast<int>(o.replica_devices.size()), 0),
        optimizer_(o.optimizer),
        devices_(o.replica_devices),
        inter_threads_(threads_per_replica(o.inter_op_threads, devices_.size())),
        intra_threads_(threads_per_replica(o.intra_op_threads, devices_.size())),
        group_(CollectiveGroup::create(members_)) {}

  std::shared_ptr<Collective> collective() const override { return group_; }
  int replicas() const override { return members_; }

  void start(ReplicaHandle first, const ReplicaTracer& trace,
             std::vector<std::shared_ptr<Sequential>> more_nets) override {
    TCTL_CHECK(more_nets.size() + 1 == static_cast<std::size_t>(members_), "a network per replica");
    first_ = first;
    for (std::size_t r = 1; r < devices_.size(); ++r) {
      auto rep = std::make_unique<Replica>(std::move(more_nets[r - 1]), optimizer_, devices_[r], inter_threads_,
                                           intra_threads_);
      rep->step = trace(*rep->net, rep->optimizer, rep->device, static_cast<int>(r), rep->inter_pool, rep->intra_pool);
      others_.push_back(std::move(rep));
    }
    threads_ = std::make_unique<RunThreads>(members_);
    for (int r = 0; r < replicas(); ++r) statistics_.push_back(moving_statistics(replica_net(r)));
  }

  const Sequential& replica_net(int r) const override {
    TCTL_CHECK(r >= 0 && r < replicas(), "replica out of range");
    return r == 0 ? *first_.net : *others_[static_cast<std::size_t>(r - 1)]->net;
  }

  // The replicas are otherwise written only by the steps: after a checkpoint was restored into the first one.
  void sync_replicas() override {
    const auto& from = first_.net->variables();
    const auto from_state = first_.optimizer->state();
    for (const auto& rep : others_) {
      const auto& to = rep->net->variables();
      const auto to_state = rep->optimizer.state();
      TCTL_CHECK(to.size() == from.size() && to_state.size() == from_state.size(), "replicas built unalike");
      for (std::size_t i = 0; i < from.size(); ++i) to[i]->assign(from[i]->read());
      for (std::size_t i = 0; i < from_state.size(); ++i) to_state[i]->assign(from_state[i]->read());
    }
  }

  AllReduceTotals all_reduce_totals() const override {
    const Collective::Stats s = group_->stats(0);
    return {steps_, s.calls, s.elements * static_cast<std::int64_t>(sizeof(float)), s.seconds};
  }

 private:
  ReplicaHandle run_handle(int r) const override {
    if (r == 0) return first_;
    Replica& rep = *others_[static_cast<std::size_t>(r - 1)];
    return {rep.net.get(), &rep.optimizer, &rep.step};
  }

  void begin_runs(const StepRequest& request) override {
    first_.optimizer->begin_step(request.step, request.accumulation);
    const float factor = first_.optimizer->lr_factor();
    for (const auto& rep : others_) {
      if (rep->optimizer.lr_factor() != factor) rep->optimizer.set_lr_factor(factor);
      rep->optimizer.begin_step(request.step, request.accumulation);
    }
  }

  // Variables a step writes without a gradient (BatchNormalization's moving statistics) moved apart, each
  // replica with its own rows' statistics: each becomes the replicas' values weighted by their rows, as
  // TensorFlow's mirrored variables aggregate such writes (the mean of the replicas' updates), and is written
  // back to all, so the replicas stay identical. The float products are added in replica order, as the
  // multi-worker all-reduce adds them in member order.
  void end_runs(const std::vector<Share>& shares, std::int64_t /*step*/) override {
    if (statistics_[0].empty()) return;
    std::vector<float> mean;
    for (int r = 0; r < replicas(); ++r) {
      const std::vector<float> v = packed_values(statistics_[static_cast<std::size_t>(r)]);
      const float w = shares[static_cast<std::size_t>(r)].weight;
      if (r == 0) mean.assign(v.size(), 0.0f);
      for (std::size_t k = 0; k < v.size(); ++k) mean[k] = r == 0 ? w * v[k] : mean[k] + w * v[k];
    }
    for (const auto& vars : statistics_) assign_packed(vars, mean);
  }

  // Every replica has returned: nobody is inside the group, which can start over for a next step. The
  // replicas may have stopped after different updates (an update refusing a NaN stops its run, and the
  // others' order depends on their threads): the first one's state goes to all, so they agree again.
  void after_failure() override {
    group_->recover();
    sync_replicas();
  }

  const OptimizerConfig optimizer_;
  const std::vector<std::string> devices_;
  const int inter_threads_, intra_threads_;
  std::shared_ptr<CollectiveGroup> group_;
  std::vector<std::unique_ptr<Replica>> others_;
  // Each replica's moving statistics (moving_statistics), found once when the replicas are made.
  std::vector<std::vector<std::shared_ptr<Variable>>> statistics_;
};

}  // namespace

std::unique_ptr<DistributionStrategy> mirrored_strategy(const ModelOptions& options) {
  return std::make_unique<MirroredStrategy>(options);
}

}  // namespace tctl
