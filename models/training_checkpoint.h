// The checkpoint of a training run, checkpoint.safetensors in the run directory: the model's variables,
// the optimizer's state (slots, step counter), any tensors the callbacks keep, and, in the metadata, where
// training stopped, the history so far and the callbacks' state. One file written to a temporary name and
// renamed, so a process killed at any moment leaves the previous checkpoint whole.
//
// Shuffling and dropout are keyed by (seed, epoch) and (seed, node, step), so position plus variables is the
// whole training state: a resumed run continues exactly as if it had never stopped.
#pragma once

#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/checkpoint.h"
#include "models/model.h"

namespace tctl {

struct TrainingState {
  std::int64_t next_epoch = 1;  // the epoch to run next (1-based)
  std::int64_t steps_done = 0;  // steps of next_epoch already taken (a checkpoint written on interrupt)
  std::vector<EpochResult> history;
  nlohmann::json callbacks = nlohmann::json::array();
  nlohmann::json config = nlohmann::json::object();  // the resolved config, for reference
};

// The tensors a checkpoint of `model` holds: variables then optimizer state, under their names.
std::vector<NamedTensor> checkpoint_tensors(const Model& model);

void save_training_checkpoint(const std::filesystem::path& path, const Model& model, const TrainingState& state,
                              const std::vector<NamedTensor>& extra);

// Reads a checkpoint into `model` (variables and optimizer state) and returns its state. The file must hold
// exactly the model's tensors plus `extra_expected`; otherwise a SpecError names the file and the first
// tensor that differs. A damaged or truncated file is a SpecError too, never a crash. `file` receives the
// decoded file, for the callbacks' tensors.
TrainingState load_training_checkpoint(const std::filesystem::path& path, Model& model,
                                       const std::vector<NamedTensor>& extra_expected, SafetensorsFile& file);

}  // namespace tctl
