// A trained run loaded back from its run directory (RunLayout names its files) for predict, evaluate and
// export: its network's inference graph (models/infer) with the saved weights, and what is needed to feed it
// new data. This part reads runs and never trains: of models/train it reads only the run's recorded config,
// its checkpoint and its data preparation, never the Model, the fit loop, the callbacks or an optimizer
// (scripts/check_layers.sh keeps its includes so).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/data/dataset.h"
#include "models/data/images.h"
#include "models/data/text_vectorizer.h"
#include "models/infer/inference.h"
#include "models/record/train_config.h"

namespace tctl {

// A trained run loaded back: its model with the saved weights, and what is needed to feed it new data.
struct LoadedRun {
  std::filesystem::path dir;
  TrainConfig config;
  std::unique_ptr<Inference> model;  // the network's inference graph, with the saved weights
  Standardizer standardizer;
  bool standardized = false;
  std::optional<TextVectorizer> text;
  std::optional<ImageOptions> images;  // a run trained on images: how a new image is decoded and resized  // a run
                                       // trained on text: its vocabulary, which turns new text into ids
  std::vector<std::string> feature_names;
  std::string label = "label";
  int num_classes = 0;
  bool binary = false;                   // binary_crossentropy: each output the probability of a 1
  std::int64_t targets = 1;              // a regression's targets per row (its CSVs' columns: target_columns)
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

// Loss and metrics of the run's model over every row of `data` (scaled and shaped for the model), in batches
// of `batch_size`, with the inference graph.
MetricValues evaluate_run(LoadedRun& run, const Dataset& data, std::int64_t batch_size);

}  // namespace tctl
