// A training run end to end: load and split the config's data, build the model, train it, and write the
// run directory (RunLayout names its files), with a checkpoint as it goes. Loading a run back for predict and
// evaluate is models/run/loaded_run.h.
//
// Run directory: model.json (resolved spec), weights.safetensors, history.csv (one row per epoch, appended
// as checkpoints are written),
// summary.json (metrics, timing, resolved config, preprocessing), test.csv (the held-out rows as read),
// checkpoint.safetensors, and the files of ModelCheckpoint callbacks (best.safetensors). Every file is
// written to a temporary name and renamed into place. A run directory never mixes two runs: a new run
// starts only in a directory that is missing or empty, or, with --overwrite, one that holds nothing but
// another run's files, which are deleted first.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/record/train_config.h"
#include "models/train/trainer.h"

namespace tctl {

struct TrainOutcome {
  // The run's last finished epoch (one before a resume included), if any; every epoch's row is in the run
  // directory's history.csv, and passes on_epoch as it ends.
  std::optional<EpochResult> last_epoch;
  std::int64_t epochs_trained = 0;  // by this call
  double train_seconds = 0.0;       // the time of those epochs
  double input_wait_seconds = 0.0;  // of which the loop waited for its batches (Trainer::input_wait_seconds)
  MetricValues test;
  double seconds = 0.0;
  double samples_per_second = 0.0;
  nlohmann::json summary;
  // Set when the interrupt flag stopped training: where the checkpoint continues. The run directory then
  // holds model.json, history.csv and checkpoint.safetensors, but no final weights or summary yet.
  // tensorctl.lock (models/io/run_lock.h) is in every run directory.
  std::optional<FitPosition> interrupted_at;
  std::int64_t first_epoch = 1;  // the first epoch this call trained (after a resume, the one it continued)
};

struct TrainControl {
  // A run directory to continue in place (`tensorctl train CONFIG --resume DIR`), or empty.
  std::filesystem::path resume;
  // `--overwrite`: a new run may replace the run in its directory (without, a non-empty directory is refused).
  bool overwrite = false;
  // Checked after every step; when it becomes true, the step in progress finishes, a checkpoint is written
  // and train_and_save returns with interrupted_at set.
  const std::atomic<bool>* interrupt = nullptr;
  // Lines from the callbacks (early stopping, best checkpoint saved, learning rate lowered).
  std::function<void(const std::string&)> on_message;
  // Called once with the model's placement warnings (Model::placement_warnings) when there are any, once
  // the input is checked (bad input gets its one line alone) and before the first step.
  std::function<void(const std::vector<std::string>&)> on_placement_warnings;
  // Called once before training with the epoch it starts at (after a resume, the checkpoint's).
  std::function<void(std::int64_t epoch)> on_start;
};

// Trains and writes the run directory, with a checkpoint after every epoch. Callbacks as for Trainer::fit.
// Without control.resume, the output directory must be missing or empty; with control.overwrite it may hold
// a run, whose files are deleted before anything is written. A directory holding any file tensorctl did not
// write is refused either way (SpecError naming the directory, and the file).
// With control.resume, loads that directory's checkpoint first (SpecError naming the directory or file when
// it is not a run of this model, or naming the config key and both values when the config changed in a way
// that alters the results: see find_resume_change) and continues to config.epochs; the directory is the output.
TrainOutcome train_and_save(const TrainConfig& config, const Trainer::EpochCallback& on_epoch,
                            const Trainer::StepCallback& on_step, const TrainControl& control = {});

}  // namespace tctl
