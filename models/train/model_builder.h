// Building the Model a config describes: its networks (one per mirrored replica), thread counts, device,
// seed, strategy and placement options.
#pragma once

#include <memory>

#include "core/mpi_world.h"
#include "models/record/train_config.h"
#include "models/train/model.h"

namespace tctl {

// Builds the model `config` describes, with its thread counts and seed; with `workers` (a multi-worker
// run's MPI world), this process's replica of it.
std::unique_ptr<Model> build_model(const TrainConfig& config, bool auto_control_dependencies = true,
                                   std::shared_ptr<MpiWorld> workers = nullptr);
// The model, or null when the config's loss does not fit its model's output (building it finds out); a
// SpecError about anything else propagates.
std::unique_ptr<Model> build_model_if_loss_fits(const TrainConfig& config);
bool loss_fits_model(const TrainConfig& config);

}  // namespace tctl
