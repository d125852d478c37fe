// The state a training checkpoint records (checkpoint.safetensors in the run directory), and reading it: the model's
// variables, the optimizer's state (slots, step counter), any tensors the callbacks keep, and, in the metadata, where
// training stopped, the history so far, the callbacks' state, the config, and the data's fingerprint and
// input scaling. One file written to a temporary name and renamed, so a process killed at any moment leaves
// the previous checkpoint whole.
//
// Shuffling and dropout are keyed by (seed, epoch) and (seed, node, step), so position plus variables is the
// whole training state: a resumed run continues exactly as if it had never stopped.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/data/dataset.h"
#include "models/infer/metrics.h"
#include "models/io/safetensors.h"

namespace tctl {

struct EpochResult {
  std::int64_t epoch = 0;  // 1-based
  std::int64_t steps = 0;
  double seconds = 0.0;
  MetricValues train;
  MetricValues validation;  // empty without validation data
};

struct TrainingState {
  std::int64_t next_epoch = 1;     // the epoch to run next (1-based)
  std::int64_t steps_done = 0;     // steps of next_epoch already taken (a checkpoint written on interrupt)
  BatchSums partial_sums;          // the loss and metric sums of those steps, so the epoch's row is whole
  std::int64_t skipped_steps = 0;  // updates of those steps dynamic loss scaling skipped (mixed_float16; hogwild's
                                   // workers make several a step)
  // The rows of the last epochs, consecutive, ending with epoch next_epoch - 1 (none before the first epoch
  // ends). A checkpoint keeps the last row alone, which the run's summary needs: the whole history is the run
  // directory's history.csv, appended as checkpoints are written, so a checkpoint's size and cost stay flat
  // however long the run (every row in every checkpoint grew to 26 MB in 18 s of `--epochs 99999999999`).
  // Checkpoints written before kept every row, and read back whole.
  std::vector<EpochResult> history;
  nlohmann::json callbacks = nlohmann::json::array();
  // The resolved config (TrainConfig::to_json()), which a resume compares with its own.
  nlohmann::json config = nlohmann::json::object();
  // The data the run trains on, which a resume must find unchanged. Absent in checkpoints written before it
  // was recorded, which resume unchecked.
  std::optional<DataFingerprint> data;
  // What predict and evaluate need to feed an interrupted run new rows, as summary.json records it:
  // {"data": {"feature_names", "label", "num_classes", "classes"}, "preprocessing": {"standardize", "mean",
  // "std"}}, read as summary.json's are. Null in checkpoints written before it was recorded.
  nlohmann::json inputs;
};

// The index of the first element of an F32 tensor that is a NaN or an infinity, or with `nonnegative` below 0;
// nothing when every element is fine or the tensor holds another type.
std::optional<std::int64_t> first_bad_element(const Tensor& t, bool nonnegative = false);

// Whether `file` was written by save_training_checkpoint (its metadata says so).
bool is_training_checkpoint(const SafetensorsFile& file);

// Reads a checkpoint's tensors into `file` and returns its training state, touching no model. A file that is
// not a tensorctl training checkpoint, or a damaged or truncated one, is a SpecError naming it, never a crash.
TrainingState read_training_checkpoint(const std::filesystem::path& path, SafetensorsFile& file);

// The metadata save_training_checkpoint (models/train/training_checkpoint.h) writes for `state` of the model
// named `model`, in the format read_training_checkpoint reads.
std::map<std::string, std::string> training_state_metadata(const std::string& model, const TrainingState& state);

}  // namespace tctl
