// The files of a run directory, by name: the one place that spells them. Training writes them, the run loader
// (predict, evaluate, export) reads them, and --overwrite and the output checks recognise them.
//
//   model.json              the resolved model spec, written before the first step
//   weights.safetensors     the final weights
//   checkpoint.safetensors  weights, optimizer state and where training stopped (training_checkpoint.h)
//   history.csv             one row per finished epoch
//   summary.json            metrics, timing, resolved config and input scaling, once the run is finished
//   test.csv                the held-out rows as read
//   tensorctl.lock          the directory's advisory lock (run_lock.h)
// and the files the run's callbacks name (a ModelCheckpoint's best.safetensors, a TensorBoard log folder of
// train/ and validation/ holding event files).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tctl {

// How sure a caller must be that a directory holds a run. kAnyMarker: one of model.json, summary.json or
// checkpoint.safetensors (--overwrite, since a run that failed in its first epoch leaves model.json alone).
// kTrained: model.json beside what training writes after it, weights, a summary or a checkpoint (the outputs'
// check, so that a folder of specs with a model.json among them is not taken for a run).
enum class RunEvidence { kAnyMarker, kTrained };

// The paths of one run directory's files. A value; touches no file but in holds_run.
class RunLayout {
 public:
  static constexpr const char* kModelFile = "model.json";
  static constexpr const char* kWeightsFile = "weights.safetensors";
  static constexpr const char* kCheckpointFile = "checkpoint.safetensors";
  static constexpr const char* kHistoryFile = "history.csv";
  static constexpr const char* kSummaryFile = "summary.json";
  static constexpr const char* kTestRowsFile = "test.csv";
  static constexpr const char* kLockFile = "tensorctl.lock";
  // The start of a TensorBoard event file's name (models/io/event_file.h).
  static constexpr const char* kEventFilePrefix = "events.out.tfevents.";

  explicit RunLayout(std::filesystem::path dir) : dir_(std::move(dir)) {}

  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path model() const { return dir_ / kModelFile; }
  std::filesystem::path weights() const { return dir_ / kWeightsFile; }
  std::filesystem::path checkpoint() const { return dir_ / kCheckpointFile; }
  std::filesystem::path history() const { return dir_ / kHistoryFile; }
  std::filesystem::path summary() const { return dir_ / kSummaryFile; }
  std::filesystem::path test_rows() const { return dir_ / kTestRowsFile; }

  // The names of the files every run may write, in the order above (callbacks' files not included).
  static const std::vector<std::string>& file_names();

  // Whether the directory holds a run, as sure as `evidence` asks.
  bool holds_run(RunEvidence evidence) const;

  // Adds the files the callbacks of a resolved config (TrainConfig::to_json) name to `names`: each callback's
  // "filename" or "log_dir". A config of another shape adds none.
  static void add_callback_files(const nlohmann::json& config, std::vector<std::string>& names);

  // Whether `entry` is one of `names`, or a temporary sibling of one that a killed process left
  // (write_file_atomic's `<name>.tmp.<pid>.<counter>`).
  static bool is_run_file(const std::string& entry, const std::vector<std::string>& names);

  // Whether `entry` is a data cache a streamed run keeps beside its files ("<stem>-<key>.rows",
  // models/data/row_cache.h), or a temporary of one.
  static bool is_data_cache(const std::string& entry);

  // Whether `dir` is a TensorBoard log folder as tensorctl writes it: train/ and validation/ holding only
  // event files.
  static bool is_log_dir(const std::filesystem::path& dir);

 private:
  std::filesystem::path dir_;
};

}  // namespace tctl
