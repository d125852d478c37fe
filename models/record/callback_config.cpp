#include "models/record/callback_config.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/text.h"
#include "models/io/run_layout.h"
#include "models/io/spec_reader.h"

namespace tctl {

nlohmann::json CallbackConfig::to_json() const {
  if (type == "TensorBoard") {
    nlohmann::json freq = update_every == 0
                              ? nlohmann::json("epoch")
                              : (update_every == 1 ? nlohmann::json("batch") : nlohmann::json(update_every));
    return {{"type", type}, {"log_dir", log_dir}, {"update_freq", freq}};
  }
  nlohmann::json j = {
      {"type", type}, {"monitor", monitor}, {"mode", maximize ? "max" : "min"}, {"min_delta", min_delta}};
  if (type == "EarlyStopping") {
    j["patience"] = patience;
    j["restore_best_weights"] = restore_best_weights;
  } else if (type == "ModelCheckpoint") {
    j["filename"] = filename;
  } else {
    j["patience"] = patience;
    j["factor"] = factor;
    j["cooldown"] = cooldown;
    j["min_lr"] = min_lr;
  }
  return j;
}

namespace {

// A file or folder name the run directory may hold for a callback: one plain name, none of the run's own.
// At most 200 bytes: the name with write_file_atomic's ".tmp.<pid>.<n>" must stay within a file name's 255.
bool plain_run_file_name(const std::string& name, bool new_run) {
  return !name.empty() && (!new_run || name.size() <= 200) && !has_control_character(name) &&
         name.find('/') == std::string::npos && name.find('\\') == std::string::npos && name != "." && name != ".." &&
         std::ranges::find(RunLayout::file_names(), name) == RunLayout::file_names().end();
}

// TensorBoard's keys: log_dir, and update_freq ("epoch", "batch", or a number of steps), as in Keras.
void parse_tensorboard(SpecReader& r, CallbackConfig& c, bool new_run) {
  c.log_dir = r.string("log_dir", "logs");
  if (!plain_run_file_name(c.log_dir, new_run))
    r.fail("log_dir", "expected a plain folder name inside the run directory, other than its own files, got " +
                          quote_for_message(c.log_dir));
  if (!r.has("update_freq")) return;
  const nlohmann::json& freq = r.raw("update_freq");
  if (freq == "epoch") {
    c.update_every = 0;
  } else if (freq == "batch") {
    c.update_every = 1;
  } else if (freq.is_string()) {
    r.fail("update_freq", "expected \"epoch\", \"batch\" or a number of steps, " + describe_json(freq));
  } else {
    c.update_every = r.positive_int("update_freq", 1);
  }
}

// What a run of `metrics` can monitor: loss and its metrics, then with validation data their val_ forms.
std::vector<std::string> monitorable(const std::vector<std::string>& metrics, bool has_validation) {
  std::vector<std::string> out{"loss"};
  for (const auto& m : metrics)
    if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
  if (!has_validation) return out;
  const std::size_t train = out.size();
  for (std::size_t i = 0; i < train; ++i) out.push_back("val_" + out[i]);
  return out;
}

}  // namespace

std::vector<CallbackConfig> parse_callbacks(const nlohmann::json& list, const std::string& file,
                                            const std::vector<std::string>& metrics, bool has_validation,
                                            const std::string& path, bool new_run) {
  if (!list.is_array()) throw SpecError(file, path, "expected a list of callbacks, " + describe_json(list));
  std::vector<CallbackConfig> out;
  const double inf = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < list.size(); ++i) {
    SpecReader r(list[i], file, path + "[" + std::to_string(i) + "]");
    CallbackConfig c;
    c.type = r.one_of("type", {"EarlyStopping", "ModelCheckpoint", "ReduceLROnPlateau", "TensorBoard"}, "");
    if (c.type.empty())
      r.fail("type", "every callback needs a type: EarlyStopping, ModelCheckpoint, ReduceLROnPlateau or TensorBoard");
    if (c.type == "TensorBoard") {
      parse_tensorboard(r, c, new_run);
      r.finish();
      out.push_back(c);
      continue;
    }
    c.monitor = r.string("monitor", "val_loss");
    static const std::vector<std::string> names{"loss", "accuracy", "top_k_accuracy", "mae", "mse"};
    const bool val = c.monitor.rfind("val_", 0) == 0;
    const std::string base = val ? c.monitor.substr(4) : c.monitor;
    const std::string can = "this run can monitor " + join(monitorable(metrics, has_validation));
    if (std::find(names.begin(), names.end(), base) == names.end())
      r.fail("monitor",
             "unknown quantity \"" + c.monitor +
                 (new_run ? "\"; " + can
                          : "\" (known: loss, accuracy, top_k_accuracy, mae, mse, each with or without val_)"));
    // A quantity the run never computes would read as 0 every epoch: EarlyStopping would stop at once, and
    // ModelCheckpoint never save.
    if (new_run && base != "loss" && std::find(metrics.begin(), metrics.end(), base) == metrics.end())
      r.fail("monitor", "\"" + c.monitor + "\" is not computed: " + base + " is not among the config's metrics (" +
                            (metrics.empty() ? std::string("none") : join(metrics)) + "); " + can);
    if (val && !has_validation)
      r.fail("monitor",
             c.monitor + " needs validation data, but data.validation_split is 0; monitor \"" + base + "\" instead");
    const std::string mode = r.one_of("mode", {"auto", "min", "max"}, "auto");
    c.maximize = mode == "max" || (mode == "auto" && base.find("accuracy") != std::string::npos);
    if (c.type == "EarlyStopping") {
      c.min_delta = r.number_in("min_delta", 0.0, 0.0, inf);
      c.patience = r.non_negative_int("patience", 0);
      c.restore_best_weights = r.boolean("restore_best_weights", false);
    } else if (c.type == "ModelCheckpoint") {
      c.min_delta = r.number_in("min_delta", 0.0, 0.0, inf);
      c.filename = r.string("filename", "best.safetensors");
      if (!plain_run_file_name(c.filename, new_run))
        r.fail("filename",
               "expected a plain file name inside the run directory, other than its own files (model.json, "
               "weights.safetensors, checkpoint.safetensors, history.csv, summary.json, test.csv), got " +
                   quote_for_message(c.filename));
    } else {
      c.factor = r.number("factor", 0.1);
      if (!(c.factor > 0.0 && c.factor < 1.0))
        r.fail("factor", "expected a factor above 0 and below 1, " + describe_json(r.raw("factor")));
      c.patience = r.non_negative_int("patience", 10);
      c.min_delta = r.number_in("min_delta", 1e-4, 0.0, inf);
      c.cooldown = r.non_negative_int("cooldown", 0);
      c.min_lr = r.number_in("min_lr", 0.0, 0.0, inf);
    }
    r.finish();
    out.push_back(c);
  }
  // Each file or folder a callback writes is its own: two ModelCheckpoints on one file would overwrite each
  // other's best, and a checkpoint file where TensorBoard keeps its folder fails only when the run writes it.
  const auto written = [](const CallbackConfig& c) {
    return c.type == "TensorBoard" ? c.log_dir : c.type == "ModelCheckpoint" ? c.filename : std::string();
  };
  for (std::size_t i = 0; i < out.size() && new_run; ++i) {
    const std::string mine = written(out[i]);
    for (std::size_t j = 0; j < i && !mine.empty(); ++j) {
      if (mine == written(out[j]))
        throw SpecError(file,
                        path + "[" + std::to_string(i) + "]." + (out[i].type == "TensorBoard" ? "log_dir" : "filename"),
                        quote_for_message(mine) + " is also callbacks[" + std::to_string(j) +
                            "]'s; each callback needs a file or folder of its own");
    }
  }
  return out;
}

}  // namespace tctl
