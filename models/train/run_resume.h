// `tensorctl train CONFIG --resume DIR`: the checks that a run directory's checkpoint may continue with this
// config and this data, and loading it into the model and the callbacks.
#pragma once

#include <filesystem>

#include "models/record/prepared_data.h"
#include "models/record/train_config.h"
#include "models/train/callbacks.h"
#include "models/train/model.h"
#include "models/train/training_checkpoint.h"

namespace tctl {

// The state a resumed run continues from: the checkpoint in `dir`, read into the model and the callbacks
// once it is known to be a run of this config at a point this data can continue. Throws SpecError naming the
// directory or file when it is not a run of this model, naming the config key and both values when the config
// changed in a way that alters the results (find_resume_change), and naming the data when it changed.
TrainingState resume_from_checkpoint(const TrainConfig& c, const std::filesystem::path& dir, const PreparedData& data,
                                     Model& model, Callbacks& callbacks);

}  // namespace tctl
