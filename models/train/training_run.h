// A training run end to end: load and split the config's data, build the model, train it, and write the
// run directory; and the reverse, loading a run directory back for evaluate and predict.
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
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/mpi_world.h"
#include "models/data/dataset.h"
#include "models/train/model.h"
#include "models/train/train_config.h"
#include "models/train/trainer.h"

namespace tctl {

// The config's data, split and scaled, checked against the model's input and output.
struct PreparedData {
  Dataset train, validation, test;
  Dataset test_raw;  // the test rows before scaling, as written to test.csv
  Standardizer standardizer;
  bool standardized = false;
  DataFingerprint fingerprint;  // of the rows as loaded, before the split (recorded in checkpoints)
};

// Loads the data of `config` for `net`. Throws SpecError naming the config when the features do not fit
// the model's input shape, or labels do not fit its output.
// `run_classes`: a trained run's class names (empty when its classes were numbers), which the labels are
// mapped to (evaluate); null when training.
PreparedData prepare_data(const TrainConfig& config, const Sequential& net,
                          const std::vector<std::string>* run_classes = nullptr);

// Builds the model `config` describes, with its thread counts and seed; with `workers` (a multi-worker
// run's MPI world), this process's replica of it.
std::unique_ptr<Model> build_model(const TrainConfig& config, bool auto_control_dependencies = true,
                                   std::shared_ptr<MpiWorld> workers = nullptr);
// The model, or null when the config's loss does not fit its model's output (building it finds out); a
// SpecError about anything else propagates.
std::unique_ptr<Model> build_model_if_loss_fits(const TrainConfig& config);
bool loss_fits_model(const TrainConfig& config);

struct TrainOutcome {
  // The run's last finished epoch (one before a resume included), if any; every epoch's row is in the run
  // directory's history.csv, and passes on_epoch as it ends.
  std::optional<EpochResult> last_epoch;
  std::int64_t epochs_trained = 0;  // by this call
  double train_seconds = 0.0;       // the time of those epochs
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

// A trained run loaded back: its model with the saved weights, and what is needed to feed it new data.
struct LoadedRun {
  std::filesystem::path dir;
  TrainConfig config;
  std::unique_ptr<Model> model;
  Standardizer standardizer;
  bool standardized = false;
  std::vector<std::string> feature_names;
  std::string label = "label";
  int num_classes = 0;
  std::vector<std::string> class_names;  // when the labels were names; label i is class_names[i]
  nlohmann::json summary;                // summary.json; empty for an interrupted run
  std::filesystem::path weights;         // the file the weights came from
};

// Loads a finished run (summary.json, weights.safetensors) or an interrupted one (checkpoint.safetensors: its
// config and input scaling come from the checkpoint; one written before checkpoints recorded the scaling has
// it recomputed from the training data). `weights`
// picks another weights file, relative to the run directory: a ModelCheckpoint's best.safetensors, or
// checkpoint.safetensors (a training checkpoint's optimizer state is ignored).
// Throws SpecError naming the directory when it is not a run (saying what is missing) or a file in it is
// damaged, and RuntimeError naming the file, the tensor and the element when a weight is NaN or infinite.
LoadedRun load_run(const std::filesystem::path& dir, int inter_op_threads = 0, int intra_op_threads = 0,
                   const std::string& weights = "");

// Refuses (SpecError naming `flag`) an output path that, once symbolic links are followed, is one of
// `inputs` (files the command reads) or one of the files a tensorctl run keeps (model.json,
// weights.safetensors, its callbacks' files...) in whatever run directory it lands: writing it would destroy
// what the command reads, or a run. "-" and an empty path (standard output, no file) pass.
void check_output_keeps_inputs(const std::string& output, const std::string& flag,
                               const std::vector<std::string>& inputs = {});

// Reads a CSV of features for a loaded run: the columns are the run's feature names, in any order, and
// the label column is optional; `keep_columns` are passed through as text. When the run's data had no
// header row, neither has this file: it holds the training file's columns, or the features alone, in order.
// Returns scaled features shaped for the model, and labels when present. Throws SpecError naming the file
// and line for a missing column, a cell that is not a number, or a class the run does not know.
struct RunInput {
  Tensor x;
  Dataset labelled;  // x and y when the CSV has the label column; size() == 0 otherwise
  std::int64_t rows = 0;
  std::vector<std::string> kept_names;         // keep_columns
  std::vector<std::vector<std::string>> kept;  // their cells: kept[k][row], as written
  std::vector<std::int64_t> row_lines;         // each row's line in the file, for messages
};
// A row whose features, once scaled, are not finite floats is refused (SpecError naming the file, the line
// and the column).
RunInput read_run_input(const LoadedRun& run, const std::string& csv_path,
                        const std::vector<std::string>& keep_columns = {});
// Refuses (SpecError naming the file and the row's line) model outputs for `in`'s rows that are not finite:
// finite inputs far outside the training data can overflow the model's sums, and a NaN must not be
// printed as a probability or counted as a correct class.
void check_finite_outputs(const Tensor& outputs, const RunInput& in, const std::string& csv_path);

}  // namespace tctl
