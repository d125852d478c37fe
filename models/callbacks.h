// Training callbacks from the config's "callbacks" list, with Keras' names and defaults:
//   {"type": "EarlyStopping", "monitor": "val_loss", "patience": 0, "min_delta": 0, "mode": "auto",
//    "restore_best_weights": false}
//   {"type": "ModelCheckpoint", "monitor": "val_loss", "mode": "auto", "filename": "best.safetensors"}
//     (saves the weights into the run directory whenever the monitored value improves: save-best-only)
//   {"type": "ReduceLROnPlateau", "monitor": "val_loss", "factor": 0.1, "patience": 10, "min_delta": 1e-4,
//    "cooldown": 0, "min_lr": 0, "mode": "auto"}
// "mode" auto watches for a maximum when the monitored name holds "acc", else for a minimum.
//
// Their state (best values, waits, best weights) is part of a training checkpoint, so a resumed run makes
// the same decisions as one that never stopped.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/checkpoint.h"
#include "models/model.h"
#include "models/trainer.h"
#include "models/spec_reader.h"

namespace tctl {

struct CallbackConfig {
  std::string type;  // EarlyStopping, ModelCheckpoint, ReduceLROnPlateau
  std::string monitor = "val_loss";
  bool maximize = false;
  double min_delta = 0.0;
  std::int64_t patience = 0;
  bool restore_best_weights = false;
  std::string filename = "best.safetensors";
  double factor = 0.1;
  std::int64_t cooldown = 0;
  double min_lr = 0.0;

  nlohmann::json to_json() const;
};

// Parses the "callbacks" array. `has_validation` tells whether val_* names can be monitored.
std::vector<CallbackConfig> parse_callbacks(const nlohmann::json& list, const std::string& file, bool has_validation);

// How ReduceLROnPlateau reaches the optimizer: the current learning rate and a way to scale it.
struct LearningRateControl {
  std::function<double()> current;
  std::function<void(double factor)> scale;
};

class Callbacks {
 public:
  // Borrows the trainer: early stopping stops it, and the weights saved and restored are its model's.
  Callbacks(std::vector<CallbackConfig> configs, Trainer& trainer, std::filesystem::path run_dir, LearningRateControl lr = {});

  // After each epoch, with its results: may stop the model, save the best weights, lower the learning
  // rate. Returns one line per action taken, for the progress output.
  std::vector<std::string> on_epoch_end(const EpochResult& r);
  // After the last epoch: restores the best weights when an EarlyStopping asks for it. Returns a line or "".
  std::string on_train_end();

  // The state to checkpoint, and the tensors it holds (the best weights of restore_best_weights).
  nlohmann::json state() const;
  std::vector<NamedTensor> tensors() const;
  // Restores both from a checkpoint; `tensors` holds at least the names tensors() gives.
  void restore(const nlohmann::json& state, const SafetensorsFile& tensors);
  // The names and shapes tensors() will have, before any epoch ran (to check a checkpoint against).
  std::vector<NamedTensor> expected_tensors() const;

 private:
  struct Watch {
    CallbackConfig config;
    double best = 0;
    bool has_best = false;
    std::int64_t wait = 0;
    std::int64_t cooldown_left = 0;
    std::int64_t best_epoch = 0;
  };
  bool improved(const Watch& w, double value) const;

  std::vector<Watch> watches_;
  Trainer& trainer_;
  Model& model_;
  std::filesystem::path run_dir_;
  LearningRateControl lr_;
  std::vector<NamedTensor> best_weights_;
};

}  // namespace tctl
