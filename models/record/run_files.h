// The files a run directory holds: the fixed ones RunLayout names and the callbacks' files its configs name.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "models/record/train_config.h"

namespace tctl {

// The names of the files the run in `dir` and the new run `c` write: the fixed ones (RunLayout::file_names),
// and the callbacks' files as `c` and the old run's summary or checkpoint recorded them (a damaged record
// adds none).
std::vector<std::string> run_file_names(const std::filesystem::path& dir, const TrainConfig& c);

}  // namespace tctl
