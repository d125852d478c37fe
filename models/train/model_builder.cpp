#include "models/train/model_builder.h"

#include <algorithm>

#include "core/errors.h"

namespace tctl {

namespace {

ModelOptions model_options(const TrainConfig& c) {
  ModelOptions o;
  static_cast<InferenceOptions&>(o) = c.inference_options();
  o.optimizer = c.optimizer;
  o.inter_op_threads = c.inter_op_threads;
  o.intra_op_threads = c.intra_op_threads;
  o.prefetch = c.prefetch;
  if (c.strategy.type == StrategyType::kMirrored && c.strategy.replicas > 1) {
    o.replica_devices = c.strategy.devices;
    if (o.replica_devices.empty()) o.replica_devices.assign(static_cast<std::size_t>(c.strategy.replicas), c.device);
  }
  o.bucket_bytes = c.strategy.bucket_bytes;
  if (c.strategy.type == StrategyType::kHogwild) o.hogwild_workers = c.strategy.workers;
  return o;
}

}  // namespace

std::unique_ptr<Model> build_model(const TrainConfig& c, bool auto_control_dependencies,
                                   std::shared_ptr<MpiWorld> workers) {
  ModelOptions options = model_options(c);
  options.auto_control_dependencies = auto_control_dependencies;
  if (workers) {
    options.worker = workers->rank();
    options.workers = std::move(workers);
  }
  // Each mirrored replica has its own network, built alike.
  std::vector<std::shared_ptr<Sequential>> nets;
  for (std::size_t r = 0; r < std::max<std::size_t>(1, options.replica_devices.size()); ++r)
    nets.push_back(std::make_shared<Sequential>(
        Sequential::from_json(c.model_spec, c.model_file, c.model_path, c.seed, c.optimizer.locking)));
  if (!c.class_weight.is_null()) {
    // Each class weighs 1 until the run knows its data (resolve_class_weights, set_class_weights).
    const std::int64_t count = class_weight_count(c.loss, Shape::concat(-1, nets[0]->output_shape()));
    if (count == 0)
      throw SpecError(c.file, "class_weight",
                      "class weights need a classification loss: sparse_categorical_crossentropy, "
                      "categorical_crossentropy, or binary_crossentropy on one output (this run's: " +
                          c.loss + " on " + Shape::concat(-1, nets[0]->output_shape()).to_string() + ")");
    options.class_weights.assign(static_cast<std::size_t>(count), 1.0f);
  }
  return std::make_unique<Model>(std::move(nets), options);
}

std::unique_ptr<Model> build_model_if_loss_fits(const TrainConfig& config) {
  try {
    return build_model(config);
  } catch (const SpecError& e) {
    if (e.where() != "loss") throw;
    return nullptr;
  }
}

bool loss_fits_model(const TrainConfig& config) { return build_model_if_loss_fits(config) != nullptr; }

}  // namespace tctl
