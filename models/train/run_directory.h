// The run directory a training run writes (RunLayout names its files): which files belong to a run, and
// taking the directory over for a new run or a resumed one.
//
// A run directory never mixes two runs: a new run starts only in a directory that is missing or empty, or,
// with --overwrite, one that holds nothing but another run's files, which are deleted first.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "models/io/run_lock.h"
#include "models/record/run_files.h"
#include "models/record/train_config.h"

namespace tctl {

// The write lock of the run directory c.output, held for the whole run. For a new run (`resuming` false)
// the directory must be missing or empty; with `overwrite` it may hold a run, whose files are deleted once the
// lock is held. A directory holding any file tensorctl did not write is refused either way (SpecError naming
// the directory, and the file); everything is checked before the first file is deleted. For a resumed run the
// directory is only locked (a missing one, or a file, yields no lock: the resume refuses it with its reason),
// and its checkpoint is read only once locked.
RunLock own_run_directory(const TrainConfig& c, bool resuming, bool overwrite);

}  // namespace tctl
