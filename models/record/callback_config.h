// The training callbacks of a config's "callbacks" list, with Keras' names and defaults:
//   {"type": "EarlyStopping", "monitor": "val_loss", "patience": 0, "min_delta": 0, "mode": "auto",
//    "restore_best_weights": false}
//   {"type": "ModelCheckpoint", "monitor": "val_loss", "mode": "auto", "min_delta": 0, "filename": "best.safetensors"}
//     (saves the weights into the run directory whenever the monitored value improves: save-best-only; min_delta
//     is tensorctl's, read because to_json() records it and every callback's improvement test uses it)
//   {"type": "ReduceLROnPlateau", "monitor": "val_loss", "factor": 0.1, "patience": 10, "min_delta": 1e-4,
//    "cooldown": 0, "min_lr": 0, "mode": "auto"}
// "mode" auto watches for a maximum when the monitored name holds "acc", else for a minimum.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tctl {

struct CallbackConfig {
  std::string type;  // EarlyStopping, ModelCheckpoint, ReduceLROnPlateau, TensorBoard
  std::string monitor = "val_loss";
  bool maximize = false;
  double min_delta = 0.0;
  std::int64_t patience = 0;
  bool restore_best_weights = false;
  std::string filename = "best.safetensors";
  double factor = 0.1;
  std::int64_t cooldown = 0;
  double min_lr = 0.0;
  std::string log_dir = "logs";   // TensorBoard: a folder of the run directory
  std::int64_t update_every = 0;  // TensorBoard: steps between per-step scalars; 0 writes per epoch only

  nlohmann::json to_json() const;
};

// Parses the "callbacks" array, which lies at JSON path `path` in `file`. A callback may monitor "loss" and
// the run's `metrics`, and with `has_validation` their val_ forms. A `new_run`'s callbacks must each write a
// file or folder of their own, named in at most 200 bytes, and monitor what the run computes; a run recorded
// before those rules keeps working.
std::vector<CallbackConfig> parse_callbacks(const nlohmann::json& list, const std::string& file,
                                            const std::vector<std::string>& metrics, bool has_validation,
                                            const std::string& path = "callbacks", bool new_run = true);

}  // namespace tctl
