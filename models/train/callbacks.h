// Training callbacks (models/train/callback_config.h has the config they are made from): after each epoch they
// may stop the trainer, save the best weights, lower the learning rate.
//
// Their state (best values, waits, best weights) is part of a training checkpoint, so a resumed run makes
// the same decisions as one that never stopped.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/io/safetensors.h"
#include "models/train/model.h"
#include "models/train/trainer.h"
#include "models/io/spec_reader.h"
#include "models/train/callback_config.h"

namespace tctl {

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
  void reduce_on_plateau(Watch& w, bool better, std::vector<std::string>& lines);

  std::vector<Watch> watches_;
  Trainer& trainer_;
  Model& model_;
  std::filesystem::path run_dir_;
  LearningRateControl lr_;
  std::vector<NamedTensor> best_weights_;
};

}  // namespace tctl
