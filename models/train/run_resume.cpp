#include "models/train/run_resume.h"

#include <fmt/format.h>

#include "core/ceil_div.h"
#include "core/errors.h"
#include "core/text.h"
#include "models/io/run_layout.h"

namespace tctl {

namespace {

// A value of the config as a message shows it: JSON, shortened; a list of another length by its length.
std::string config_value_text(const nlohmann::json& v) {
  if (v.is_null()) return "nothing";
  if (v.is_array()) return fmt::format("a list of {}", v.size());
  std::string text = v.dump();
  return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}

// --resume continues a run only with the config it was trained with, but for the keys that change no result.
void check_resume_config(const TrainingState& saved, const TrainConfig& c, const std::filesystem::path& dir) {
  const auto change = find_resume_change(saved.config, c.to_json());
  if (!change) return;
  throw SpecError(
      c.file, change->key,
      fmt::format("cannot resume {}: its checkpoint was trained with {}, this run has {}; a resumed run may "
                  "change only {} (to train otherwise, start a new run with --output or --overwrite)",
                  dir.string(), config_value_text(change->before), config_value_text(change->after),
                  join(kResumeMayChange)));
}

// The names quoted, as join_first lists them: a message about 100,000 columns stays one short line.
std::string column_list(const std::vector<std::string>& names) {
  if (names.empty()) return "(not recorded)";
  std::vector<std::string> quoted;
  for (const std::string& name : names) quoted.push_back(quote_for_message(name));
  return join_first(quoted);
}

// The feature names a checkpoint's input record holds, or none when it is damaged or missing.
std::vector<std::string> recorded_feature_names(const nlohmann::json& inputs) {
  try {
    return inputs.at("data").at("feature_names").get<std::vector<std::string>>();
  } catch (const std::exception&) {
    return {};
  }
}

// --resume continues a run only on the data it was trained on, as loaded before the split: the same path
// holding other rows (or TENSORCTL_DATA_DIR pointing at another digits.csv) would continue with other batches
// and another scaling. A checkpoint that recorded no fingerprint (written before there was one) is not checked.
void check_resume_data(const TrainingState& saved, const TrainConfig& c, const PreparedData& data,
                       const std::filesystem::path& dir) {
  if (!saved.data) return;
  const DataFingerprint& now = data.fingerprint;
  const bool same_columns = !saved.data->columns || saved.data->columns == now.columns;
  if (saved.data->rows == now.rows && saved.data->hash == now.hash && same_columns) return;
  std::string what;
  if (saved.data->rows != now.rows)
    what = fmt::format("{} holds {} rows, where the data its checkpoint was trained on held {}", data_source(c),
                       now.rows, saved.data->rows);
  else if (saved.data->hash != now.hash)
    what = fmt::format("{} has changed since its checkpoint was written: the rows' values differ", data_source(c));
  else
    what = fmt::format("{} has changed since its checkpoint was written: its columns are named {}, where they were {}",
                       data_source(c), column_list(data.test_raw.feature_names),
                       column_list(recorded_feature_names(saved.inputs)));
  throw SpecError(c.file, data_key(c),
                  fmt::format("cannot resume {}: {}; a resumed run trains on the same data (to train on this data, "
                              "start a new run with --output or --overwrite)",
                              dir.string(), what));
}

}  // namespace

// The state a resumed run continues from: the checkpoint in `dir`, read into the model and the callbacks
// once it is known to be a run of this config at a point this data can continue.
TrainingState resume_from_checkpoint(const TrainConfig& c, const std::filesystem::path& dir, const PreparedData& data,
                                     Model& model, Callbacks& callbacks) {
  const RunLayout run(dir);
  const std::filesystem::path checkpoint = run.checkpoint();
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw SpecError(dir.string(), "",
                    std::filesystem::exists(dir, ec) ? "cannot resume: a file, not a run directory"
                                                     : "cannot resume: the run directory does not exist");
  // A run that failed in its first epoch leaves model.json and no checkpoint: it can only start again.
  if (!std::filesystem::exists(checkpoint, ec) && std::filesystem::exists(run.model(), ec))
    throw SpecError(dir.string(), "",
                    "cannot resume: the run in it has no checkpoint.safetensors (a run that failed in its first epoch "
                    "writes none); train it again with --output " +
                        dir.string() + " --overwrite");
  if (!std::filesystem::exists(checkpoint, ec))
    throw SpecError(dir.string(), "", "cannot resume: not a run directory (checkpoint.safetensors is missing)");
  // A file the run writes that is now a directory would fail only after training, with the checkpoint and
  // history already past the summary.
  for (const std::string& name : RunLayout::file_names())
    if (std::filesystem::is_directory(dir / name, ec))
      throw SpecError((dir / name).string(), "", "cannot resume: a directory stands where the run writes this file");
  SafetensorsFile file;
  TrainingState saved = read_training_checkpoint(checkpoint, file);
  check_resume_config(saved, c, dir);
  check_resume_data(saved, c, data, dir);
  try {
    callbacks.restore_state(saved.callbacks);
  } catch (const SpecError& e) {
    throw SpecError(checkpoint.string(), e.where(), e.message());
  }
  restore_training_checkpoint(checkpoint, file, model, callbacks.expected_tensors());
  callbacks.restore_tensors(file);
  const std::int64_t steps_per_epoch = ceil_div(data.train.size(), c.batch_size);
  if (saved.steps_done >= steps_per_epoch)
    throw SpecError(checkpoint.string(), "header",
                    fmt::format("the checkpoint is {} steps into epoch {}, but an epoch of {} has {} steps: the data "
                                "changed since",
                                saved.steps_done, saved.next_epoch, data_source(c), steps_per_epoch));
  // Its weights are part way through that epoch: stopping before it ends would save them as a run of fewer
  // epochs than they have seen.
  if (saved.steps_done > 0 && c.epochs < saved.next_epoch)
    throw SpecError(c.file, "epochs",
                    fmt::format("the checkpoint in {} is {} steps into epoch {}; resume with --epochs {} or more to "
                                "finish that epoch",
                                dir.string(), saved.steps_done, saved.next_epoch, saved.next_epoch));
  TrainingState state;
  state.next_epoch = saved.next_epoch;
  state.steps_done = saved.steps_done;
  state.partial_sums = saved.partial_sums;
  state.skipped_steps = saved.skipped_steps;
  state.history = std::move(saved.history);
  return state;
}

}  // namespace tctl
