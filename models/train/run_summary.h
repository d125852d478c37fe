// What a finished run records besides its weights: summary.json (metrics, timing, devices, strategy, resolved
// config, and the inputs' names, classes and scaling) and test.csv (the held-out rows as read).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "models/data/dataset.h"
#include "models/io/atomic_file.h"
#include "models/record/prepared_data.h"
#include "models/record/train_config.h"
#include "models/train/model.h"

namespace tctl {

struct TrainOutcome;

// What predict and evaluate need to feed the run new rows: summary.json's "data" ({"feature_names", "label",
// "num_classes", "classes"}) and "preprocessing" ({"standardize", "mean", "std"}), which checkpoints record
// too (TrainingState::inputs).
nlohmann::json input_record(const TrainConfig& c, const PreparedData& data);

// summary.json's content for the run `out` describes.
nlohmann::json run_summary(const TrainConfig& c, const Model& model, const PreparedData& data, const TrainOutcome& out);

// The rows as CSV, with a header row unless the data had none (so the file reads back as the data did). With
// `text_column`, each row's text (Dataset::texts) under that name instead of its features (token ids); rows of
// images (Dataset::paths), each image's path under kImagePathColumn instead of its pixels.
std::string dataset_csv(const Dataset& d, const std::string& label, bool header, const std::string& text_column = "");
// dataset_csv's text a megabyte at a time, through `write` (write_file_atomic's producer).
void write_dataset_csv(PieceWriter write, const Dataset& d, const std::string& label, bool header,
                       const std::string& text_column = "");

}  // namespace tctl
