// Training callbacks (models/record/callback_config.h has the config they are made from): after each epoch they
// may stop the trainer, save the best weights, lower the learning rate, log to TensorBoard. One class per callback,
// behind the Callback interface, made by make_callback; Callbacks is the list a training run holds.
//
// Their state (best values, waits, best weights) is part of a training checkpoint, so a resumed run makes
// the same decisions as one that never stopped.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/io/safetensors.h"
#include "models/record/callback_config.h"
#include "models/train/model.h"
#include "models/train/trainer.h"

namespace tctl {

// How ReduceLROnPlateau reaches the optimizer: the current learning rate and a way to scale it.
struct LearningRateControl {
  std::function<double()> current;
  std::function<void(double factor)> scale;
};

// What a callback may act on. Borrows the trainer: early stopping stops it, and the weights saved and
// restored are its model's. Without `lr`, ReduceLROnPlateau watches but lowers nothing.
struct CallbackContext {
  Trainer& trainer;
  std::filesystem::path run_dir;  // where ModelCheckpoint writes its file
  LearningRateControl lr;
  // False on the workers of a multi-worker run other than rank 0, which alone writes the run directory:
  // their callbacks decide as rank 0's do and write nothing.
  bool write_files = true;
};

// The watch every callback keeps on its monitored value, as Keras' callbacks keep it; the state a checkpoint
// records for it (names as in the checkpoint's JSON).
struct MonitorState {
  double best = 0;
  bool has_best = false;
  std::int64_t wait = 0;           // epochs since the last improvement
  std::int64_t cooldown_left = 0;  // ReduceLROnPlateau's epochs of cooldown still to come
  std::int64_t best_epoch = 0;
};

// One training callback. Not thread-safe: the thread driving the trainer calls it.
class Callback {
 public:
  explicit Callback(CallbackConfig config) : config_(std::move(config)) {}
  virtual ~Callback() = default;
  Callback(const Callback&) = delete;
  Callback& operator=(const Callback&) = delete;

  // After each epoch, with its results. Returns one line per action taken, for the progress output.
  virtual std::vector<std::string> on_epoch_end(const EpochResult& r) = 0;
  // After each training step of `epoch` (1-based step of `steps`), with the running averages of the epoch.
  virtual void on_step_end(std::int64_t /*epoch*/, std::int64_t /*step*/, std::int64_t /*steps*/,
                           const MetricValues& /*running*/) {}
  // After the last epoch. Returns a line, or "" when it did nothing.
  virtual std::string on_train_end() { return ""; }

  // The state to checkpoint: {"type", "best", "has_best", "wait", "cooldown_left", "best_epoch"}.
  virtual nlohmann::json state() const;
  // Restores state() from a checkpoint, checked as training writes it. Throws SpecError at `where`
  // ("__metadata__.callbacks[1]") when the state is not an object, lacks a key or names another type of
  // callback, and at its key (`where`.wait) for a value of another type, a negative count or a best that is
  // not finite.
  virtual void restore(const nlohmann::json& state, const std::string& where);
  // The tensors it checkpoints; the names and shapes a checkpoint of its restored state must hold (to check
  // a checkpoint against); and restoring them from a checkpoint that holds at least those names.
  virtual std::vector<NamedTensor> tensors() const { return {}; }
  virtual std::vector<NamedTensor> expected_tensors() const { return {}; }
  virtual void restore_tensors(const SafetensorsFile& /*file*/) {}

 protected:
  // The monitored value in r (val_* from the validation metrics).
  double monitored(const EpochResult& r) const;
  // Records epoch's value: an improvement (by more than min_delta, in the config's direction; never a NaN or
  // an infinity) becomes the best and clears the wait, anything else adds an epoch to it. Returns whether
  // it improved.
  bool record(double value, std::int64_t epoch);

  const CallbackConfig config_;
  MonitorState watch_;
};

// The callback `config` describes (its type is one parse_callbacks accepts).
std::unique_ptr<Callback> make_callback(const CallbackConfig& config, const CallbackContext& context);

// The callbacks of a config, in its order: what a training run calls after each epoch and checkpoints.
class Callbacks {
 public:
  Callbacks(const std::vector<CallbackConfig>& configs, Trainer& trainer, std::filesystem::path run_dir,
            LearningRateControl lr = {}, bool write_files = true);

  // Every callback's lines, in order.
  std::vector<std::string> on_epoch_end(const EpochResult& r);
  void on_step_end(std::int64_t epoch, std::int64_t step, std::int64_t steps, const MetricValues& running);
  // The first line a callback gives at the end (an EarlyStopping restoring its best weights), or "".
  std::string on_train_end();

  // The state to checkpoint, one entry per callback, and the tensors they hold (the best weights of
  // restore_best_weights, "best/<variable>"; two callbacks holding a name share it, the first one's kept).
  nlohmann::json state() const;
  std::vector<NamedTensor> tensors() const;
  // Resuming takes three steps: restore_state from the checkpoint's JSON (a SpecError naming the key under
  // __metadata__.callbacks when it lists other callbacks than the config, or a state training could not have
  // written); expected_tensors, the names and shapes the checkpoint must then hold (none
  // before the first epoch ended); and restore_tensors, once the checkpoint has been checked against them.
  void restore_state(const nlohmann::json& state);
  std::vector<NamedTensor> expected_tensors() const;
  void restore_tensors(const SafetensorsFile& tensors);

 private:
  std::vector<std::unique_ptr<Callback>> callbacks_;
};

}  // namespace tctl
