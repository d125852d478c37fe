// Writing a model's training checkpoint (checkpoint.safetensors: its variables, the optimizer's state and
// the callbacks' tensors, with the TrainingState of models/record/training_state.h as metadata) and restoring
// one into a model. One file written to a temporary name and renamed, so a process killed at any moment leaves
// the previous checkpoint whole.
#pragma once

#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/io/safetensors.h"
#include "models/record/training_state.h"
#include "models/train/model.h"

namespace tctl {

// The tensors a checkpoint of `model` holds: variables then optimizer state, under their names.
std::vector<NamedTensor> checkpoint_tensors(const Model& model);

void save_training_checkpoint(const std::filesystem::path& path, const Model& model, const TrainingState& state,
                              const std::vector<NamedTensor>& extra);

// Loads a checkpoint read by read_training_checkpoint into `model` (variables and optimizer state). The file
// must hold exactly the model's tensors plus `extra_expected` (the callbacks'); otherwise a SpecError names
// `path` and the first tensor that differs.
void restore_training_checkpoint(const std::filesystem::path& path, const SafetensorsFile& file, Model& model,
                                 const std::vector<NamedTensor>& extra_expected);

}  // namespace tctl
