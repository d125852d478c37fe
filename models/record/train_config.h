// The train config: which model, which data, which loss and optimizer, how long, how many threads, where
// to write the run. Parsed and validated in full before anything runs; every error names the file and the
// JSON path.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/data/images.h"
#include "models/data/text_vectorizer.h"

#include "models/infer/inference.h"
#include "models/record/callback_config.h"
#include "models/record/optimizer_config.h"

namespace tctl {

struct DataConfig {
  std::string dataset;  // built-in name, or empty when `csv` or `x` is set
  std::string csv;      // resolved path of a CSV file
  std::string x, y;     // resolved paths of array files (.npy, .npz or IDX; models/data/arrays.h): features, labels
  std::string x_key, y_key;  // the arrays of .npz files to read; empty: a file's only array
  std::string label = "label";
  bool header = true;  // false: the CSV has no header row; columns are named "1", "2", ...
  double test_split = 0.2;
  double validation_split = 0.1;
  // Cross-validation (train --folds): the rows after the test split in `folds` folds, fold `fold` (1-based)
  // the validation rows in place of validation_split's; 0 and 0 without.
  std::int64_t folds = 0, fold = 0;
  bool shuffle = true;
  bool standardize = true;  // false by default with `text`: token ids are no measurements
  // "text": {...}: the CSV's features are one column of text, turned into token ids (models/data/text_vectorizer.h).
  std::optional<TextOptions> text;
  // "images": {"directory": ..., ...}: a folder of class folders of images (models/data/images.h). `images` is
  // the resolved folder; image_options' height, width and channels are 0 until taken from the model.
  std::string images;
  ImageOptions image_options{.height = 0, .width = 0, .channels = 0, .interpolation = ImageInterpolation::kBilinear};

  // Streaming (models/data/row_stream.h) of a CSV (numbers or texts), arrays or images: "stream": true
  // reads the data once into a binary cache and trains from it a window of `shuffle_buffer` rows at a time;
  // false holds the data in memory; absent ("auto"), it streams when the data would not fit in the memory
  // limit, and says so.
  enum class Stream { kAuto, kOn, kOff };
  Stream stream = Stream::kAuto;
  std::int64_t shuffle_buffer = 0;  // rows per window; 0: as many as fit in 1/16 of the memory limit
  std::string cache;                // the cache's folder (resolved); empty: the run directory

  // Whether the config names data at all (a model spec profiled without a config has none).
  bool any() const { return !dataset.empty() || !csv.empty() || !x.empty() || !images.empty(); }

  nlohmann::json to_json() const;
};

// Data parallelism (the config's "strategy"; default none):
//   {"type": "mirrored", "replicas": N, "devices": ["cpu", "sim:0"], "bucket_bytes": 4194304}
// N replicas in this process, one per device (default: all on the config's device), the global batch
// split between them and their gradients all-reduced in buckets of up to bucket_bytes (models/train/model.h).
//   {"type": "multi-worker", "bucket_bytes": 4194304, "timeout_seconds": 60}
// One process per worker, started by mpirun; the same split and all-reduce over MPI (core/mpi_world.h).
//   {"type": "hogwild", "workers": N}
// N threads share one replica and its variables, each applying its own share's update under the
// optimizer's `locking` (Hogwild when that is none): the classic alternative, for comparison.
enum class StrategyType { kNone, kMirrored, kMultiWorker, kHogwild };

// JSON spelling ("none", "mirrored", "multi-worker", "hogwild"), as the config, summary.json and --json write it.
std::string_view strategy_type_name(StrategyType type);

struct StrategyConfig {
  StrategyType type = StrategyType::kNone;
  int replicas = 1;
  int workers = 2;                   // hogwild: threads sharing the one replica
  std::vector<std::string> devices;  // mirrored: one per replica; empty: all on the config's device
  std::int64_t bucket_bytes = std::int64_t{4} << 20;
  double timeout_seconds = 60.0;  // multi-worker: how long an all-reduce waits for the other ranks
  nlohmann::json to_json() const;
};

// Where the JSON that TrainConfig::from_json reads came from.
enum class ConfigOrigin {
  // A config file as written: relative paths inside it are resolved against its folder, and the data file
  // must exist.
  kConfigFile,
  // The resolved config a run recorded (TrainConfig::to_json() in summary.json): its paths are resolved
  // already, its data file may have moved since, and it holds keep_denormals (a flag at train time).
  kRunRecord,
};

struct TrainConfig {
  std::string file;           // the config file, as given
  nlohmann::json model_spec;  // the model spec object
  std::string model_file;     // the file the spec came from (the config itself when inline)
  std::string model_path;     // JSON path of the spec inside model_file ("model" when inline, "" otherwise)
  // The Keras .keras or .h5 file the model came from, whose weights a new run starts from
  // (models/record/keras_model_file.h); empty for a spec or a to_json() file, whose weights are initialized.
  std::string keras_weights;
  DataConfig data;
  std::string loss = "sparse_categorical_crossentropy";
  OptimizerConfig optimizer;
  std::vector<std::string> metrics{"accuracy"};
  std::int64_t epochs = 10;
  std::int64_t batch_size = 32;
  std::int64_t prefetch = 2;  // batches prepared ahead by the input pipeline's producer thread
  // The least time between two end-of-epoch checkpoints; 0 writes one after every epoch. The first and
  // the last epoch of a run, and a run stopped early or interrupted, always get theirs.
  double checkpoint_seconds = 1.0;
  std::uint64_t seed = 0;
  int inter_op_threads = 0;
  int intra_op_threads = 0;
  int data_threads = 0;  // threads reading the data: parsing a CSV, decoding images; 0: one per core
  std::vector<CallbackConfig> callbacks;
  // Keras' class_weight: "balanced" or {"class": weight, ...} (models/train/class_weights.h); null: none.
  nlohmann::json class_weight;
  std::string device = "cpu";
  // GPU matrix products may use TF32 tensor cores (the backend flag "allow_tf32", core/device.h backend_flag); off by
  // default.
  bool allow_tf32 = false;
  // Record each device's part of a training step once and replay it (core/device_graph.h) where the device can
  // record; off by default while a thread reading a variable a replay writes is not yet locked out for the
  // replay (docs/devices.md). Changes no result.
  bool device_graphs = false;
  // Keras' dtype policy: "float32", "mixed_bfloat16" or "mixed_float16" (models/record/precision.h): which type
  // products and activations compute in; mixed_float16 also turns on dynamic loss scaling, whose settings
  // ("loss_scale": {"initial_scale", "dynamic_growth_steps"}) are optimizer.loss_scale.
  std::string precision = "float32";
  StrategyConfig strategy;
  bool keep_denormals = false;  // `train --keep-denormals` (a flag, not a config key): it changes the numbers
  // `train --strict-placement` and `--log-device-placement` (flags; they change no result).
  bool strict_placement = false;
  bool log_device_placement = false;
  std::string output;  // run directory
  // load_model_file of a model spec or a Keras export: the training keys (loss, metrics, ...) are defaults
  // nobody chose. Not recorded.
  bool spec_only = false;
  nlohmann::json callbacks_json() const;
  // The files the config reads: itself, its model spec or Keras file, its data files (a CSV, arrays). An
  // output that lands on one of them is refused (models/run/output_check.h).
  std::vector<std::string> input_files() const;
  // Sets `precision` and what the policy turns on: dynamic loss scaling with mixed_float16.
  void set_precision(const std::string& policy);
  // What the inference graph of the config's model needs (models/infer): the loss, metrics, device, seed and
  // placement; the device, with a mirrored strategy of named devices, the first replica's.
  InferenceOptions inference_options() const;

  // The resolved config, with the model spec inline, as written to summary.json and recorded in checkpoints.
  // The "threads" object: inter_op, intra_op, and data when it is set.
  nlohmann::json threads_json() const;
  nlohmann::json to_json() const;

  // Reads and validates the config `j`, which lies at `json_path` ("" for the whole file) in `file`. Every
  // mistake is a SpecError naming `file` and the JSON path: `runs/a/summary.json: config.batch_size: ...`.
  // The default output is runs/<stem of file>. Reads the model file a config names, nothing else.
  static TrainConfig from_json(const nlohmann::json& j, const std::string& file, const std::string& json_path = "",
                               ConfigOrigin origin = ConfigOrigin::kConfigFile);
};

// A key whose value differs between two resolved configs (TrainConfig::to_json()): its JSON path
// ("batch_size", "optimizer.learning_rate", "model.layers[1].units") and its value on each side (null
// where a side lacks the key).
struct ConfigChange {
  std::string key;
  nlohmann::json before;
  nlohmann::json after;
};

// The first change from the config a checkpoint recorded (`before`) to the config of a run resuming it
// (`after`) that would alter the run's results. Only the keys of kResumeMayChange may change; any other
// key, including one added to the config later, counts. A data.csv spelled differently that names the same
// file is no change. nullopt when nothing else changed.
std::optional<ConfigChange> find_resume_change(const nlohmann::json& before, const nlohmann::json& after);

// The keys a resumed run may change: epochs, threads, prefetch, checkpoint_seconds, output, and how the data
// is held: data.stream and data.cache (a stream of one window trains the in-memory run's bits).
extern const std::vector<std::string> kResumeMayChange;

// Reads and validates a train config file (TrainConfig::from_json of its JSON). Relative paths inside it
// (model file, CSV data) are resolved against the config's folder. The default output is runs/<config stem>.
TrainConfig load_train_config(const std::string& path);

// What a JSON file given where a model is expected holds: a train config (an object with a "model"), a
// Keras export (an object with a "class_name"), or else a tensorctl model spec. Decided here only.
enum class ModelFileKind { kTrainConfig, kSpec, kKerasExport };
ModelFileKind classify_model_file(const nlohmann::json& doc);
// The model spec of a spec file's or a Keras export's JSON (converted; `file` names it in errors).
nlohmann::json model_spec_from(const nlohmann::json& doc, const std::string& file);
// The train config of any model file: a train config's own (load_train_config); for a spec or a Keras
// export, the defaults around it (no data: callers feed random inputs; metrics: accuracy).
TrainConfig load_model_file(const std::string& path);

}  // namespace tctl
