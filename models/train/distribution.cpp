#include "models/train/distribution.h"

#include <algorithm>

#include "core/errors.h"
#include "models/train/model.h"

namespace tctl {

void DistributionStrategy::start(ReplicaHandle first, const ReplicaTracer& /*trace*/,
                                 std::vector<std::shared_ptr<Sequential>> more_nets) {
  TCTL_CHECK(more_nets.empty(), "only a mirrored model has a network per replica");
  first_ = first;
}

const Sequential& DistributionStrategy::replica_net(int r) const {
  TCTL_CHECK(r == 0, "replica out of range");
  return *first_.net;
}

int threads_per_replica(int asked, std::size_t replicas) {
  if (asked > 0 || replicas <= 1) return asked;
  return std::max(1, ThreadPool::hardware_threads() / static_cast<int>(replicas));
}

std::vector<Tensor> run_whole_batch(ReplicaHandle replica, const StepRequest& request) {
  TCTL_CHECK(request.batch_rows == 0 || request.batch_rows == request.x.shape()[0],
             "a partial batch fed to a single replica");
  const TracedPass& pass = replica.step->pass;
  const Feed feeds[] = {{pass.x, request.x}, {pass.targets, request.targets}};
  const Output fetches[] = {pass.loss, pass.scores};
  RunOptions ro;
  ro.step = request.step;
  ro.profiler = request.profiler;
  replica.optimizer->begin_step(request.step, request.accumulation);
  return replica.step->session->run(feeds, std::span<const Output>(fetches).first(request.scores ? 2 : 1),
                                    request.accumulation.apply ? pass.updates : pass.accumulates, ro);
}

namespace {

class SingleStrategy final : public DistributionStrategy {
 public:
  std::vector<Tensor> step(const StepRequest& request) override { return run_whole_batch(first_, request); }
};

}  // namespace

std::unique_ptr<DistributionStrategy> single_strategy() { return std::make_unique<SingleStrategy>(); }

std::unique_ptr<DistributionStrategy> make_distribution_strategy(const ModelOptions& options, std::size_t nets) {
  const bool in_process = options.replica_devices.size() > 1;
  TCTL_CHECK(!(in_process && options.workers), "a model is mirrored in-process or across workers, not both");
  TCTL_CHECK(nets == (in_process ? options.replica_devices.size() : 1),
             "a mirrored model needs one network per replica device");
  TCTL_CHECK(options.hogwild_workers == 0 || !(in_process || options.workers),
             "hogwild shares one replica's variables; it is not mirrored");
  if (in_process) return mirrored_strategy(options);
  if (options.workers) return multi_worker_strategy(options.workers, options.worker);
  if (options.hogwild_workers > 0) return hogwild_strategy(options.hogwild_workers);
  return single_strategy();
}

}  // namespace tctl
