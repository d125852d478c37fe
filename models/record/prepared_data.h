// The data a run trains on: the config's data set loaded, checked against the model's input and output,
// split into train, validation and test rows, and scaled as the config says.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "models/data/dataset.h"
#include "models/data/images.h"
#include "models/data/text_vectorizer.h"
#include "models/nn/sequential.h"
#include "models/record/train_config.h"

namespace tctl {

// How a streamed run holds its data: its cache, whether it was there already, the rows of a window, and the
// line saying why the run streams when it chose to itself (empty when asked to).
struct StreamedData {
  std::filesystem::path cache;
  bool reused = false;
  std::int64_t window_rows = 0;
  std::string note;
};

// The config's data, split and scaled, checked against the model's input and output.
struct PreparedData {
  Dataset train, validation, test;
  Dataset test_raw;  // the test rows before scaling, as written to test.csv
  Standardizer standardizer;
  bool standardized = false;
  // Text data: the vocabulary learned from the training rows, which vectorized every part (each part keeps
  // its texts too, for test.csv).
  std::optional<TextVectorizer> text;
  // Image data: how each image was decoded and resized (each part keeps its files' paths, for test.csv).
  std::optional<ImageOptions> images;
  DataFingerprint fingerprint;  // of the rows as loaded, before the split (recorded in checkpoints)
  // Set for a streamed run (each part's Dataset::stream).
  std::optional<StreamedData> streamed;
};

// Loads the data of `config` for `net`. Throws SpecError naming the config when the features do not fit
// the model's input shape, or labels do not fit its output.
// `run_classes`: a trained run's class names (empty when its classes were numbers), which the labels are
// mapped to (evaluate); null when training. `run_text`: a trained run's vocabulary, which turns text into ids
// instead of one learned from the config's training rows (evaluate); null when training.
PreparedData prepare_data(const TrainConfig& config, const Sequential& net,
                          const std::vector<std::string>* run_classes = nullptr,
                          const TextVectorizer* run_text = nullptr);

// The rows of x ([N, features]) reshaped to [N, ...input_shape]; the element counts must agree.
Tensor shape_for_model(const Tensor& x, const Sequential& net);

// "dataset iris" or "data.csv", for messages that compare the data with the model.
std::string data_source(const TrainConfig& c);

// The config key that names the data: "data.csv" for a file, "data" for a built-in dataset.
std::string data_key(const TrainConfig& c);

// "layers[3]": the JSON key of the model's last layer, whose size sets the number of classes.
std::string last_layer_key(const Sequential& net);

// A value of x ([rows, features], unscaled) that is no token id for a network whose first layer takes them
// (Layer::token_ids: a whole number in [0, token_ids)): its row, and what is wrong, as "column \"t3\": 31.5 is
// not a token id of ..."; none for another network, or when every value is one.
struct TokenIdProblem {
  std::int64_t row = 0;
  std::string message;
};
std::optional<TokenIdProblem> find_bad_token_id(const Sequential& net, const Tensor& x,
                                                const std::vector<std::string>& feature_names);

}  // namespace tctl
