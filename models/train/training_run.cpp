#include "models/train/training_run.h"

#include <fmt/format.h>
#include <algorithm>
#include <chrono>
#include <optional>

#include "core/errors.h"
#include "core/fnv.h"
#include "core/text.h"
#include "models/data/csv.h"
#include "models/io/atomic_file.h"
#include "models/io/run_layout.h"
#include "models/io/run_lock.h"
#include "models/io/safetensors.h"
#include "models/io/spec_reader.h"
#include "models/nn/memory_budget.h"
#include "models/record/keras_model_file.h"
#include "models/record/precision.h"
#include "models/record/prepared_data.h"
#include "models/train/callbacks.h"
#include "models/train/class_weights.h"
#include "models/train/history_log.h"
#include "models/train/model_builder.h"
#include "models/train/run_directory.h"
#include "models/train/run_resume.h"
#include "models/train/run_summary.h"
#include "models/train/training_checkpoint.h"

namespace tctl {

namespace {

// A callback that monitors a val_ quantity needs validation rows: with none, val_loss would read as 0 every
// epoch (EarlyStopping restoring epoch 1, ModelCheckpoint never saving, ReduceLROnPlateau lowering the rate
// without end). An explicit validation_split of 0 is refused where the config is read; this is the split
// that rounds to no row.
void check_validation_monitors(const TrainConfig& c, const PreparedData& data) {
  if (data.validation.size() > 0) return;
  for (std::size_t i = 0; i < c.callbacks.size(); ++i) {
    const CallbackConfig& cb = c.callbacks[i];
    if (cb.type == "TensorBoard" || !cb.monitor.starts_with("val_")) continue;
    const std::int64_t left = data.train.size() + data.validation.size();
    throw SpecError(c.file, fmt::format("callbacks[{}].monitor", i),
                    fmt::format("{} needs validation data, but data.validation_split {:g} of the {} rows left after "
                                "the test split rounds to 0 rows; raise validation_split or monitor \"{}\"",
                                cb.monitor, c.data.validation_split, left, cb.monitor.substr(4)));
  }
}

// Every text the run records in its JSON files (model.json, summary.json, the checkpoint's header) must be
// UTF-8, or the first write after an epoch fails without naming what: the config's values (paths resolved
// against a config whose own path is not UTF-8) and the run directory's path. The data's names are checked
// where the CSV is read.
void check_utf8_text(const nlohmann::json& j, const std::string& key, const std::string& file) {
  if (j.is_string()) {
    const std::string& text = j.get_ref<const std::string&>();
    if (const auto bad = first_non_utf8(text)) throw SpecError(file, key, not_utf8_message("the value", text, *bad));
    return;
  }
  if (j.is_array())
    for (std::size_t i = 0; i < j.size(); ++i) check_utf8_text(j[i], fmt::format("{}[{}]", key, i), file);
  if (j.is_object())
    for (const auto& [k, v] : j.items()) check_utf8_text(v, key.empty() ? k : key + "." + k, file);
}

void check_utf8_record(const TrainConfig& c) {
  if (const auto bad = first_non_utf8(c.output))
    throw SpecError(
        c.output, "",
        not_utf8_message("the run directory (--output, --resume or the config's \"output\")", c.output, *bad));
  check_utf8_text(c.to_json(), "", c.file);
}

LearningRateControl learning_rate_control(Optimizer& optimizer) {
  return {[&optimizer] { return optimizer.learning_rate(); },
          [&optimizer](double f) { optimizer.set_lr_factor(optimizer.lr_factor() * f); }};
}

// With the callbacks' state as it is now: an interrupt before the first epoch's end writes it too. The
// history's rows reach the disk first.
void write_checkpoint(const std::filesystem::path& dir, const Model& model, TrainingState& state,
                      const Callbacks& callbacks, HistoryLog& history) {
  state.callbacks = callbacks.state();
  history.flush();
  save_training_checkpoint(RunLayout(dir).checkpoint(), model, state, callbacks.tensors());
}

// Trains from `state` to c.epochs, or until a callback stops it or the interrupt flag is set; after every
// epoch the callbacks act, and a checkpoint is written after the first epoch, then after any epoch that ends
// c.checkpoint_seconds or more after the last one was written, and after the last epoch trained (an
// interrupted run writes its own, mid-epoch). Any of them resumes to the same bits; the cadence keeps
// short epochs from spending their time on checkpoints (the digits MLP's 1.5 ms epochs trained 6 % slower
// writing one after each). `state` ends where training ended.
void fit_with_checkpoints(const TrainConfig& c, const PreparedData& data, Trainer& trainer, Callbacks& callbacks,
                          TrainingState& state, const Trainer::EpochCallback& on_epoch,
                          const Trainer::StepCallback& on_step, const TrainControl& control, bool writer,
                          HistoryLog& history, TrainOutcome& out) {
  const std::filesystem::path dir = c.output;
  std::optional<std::chrono::steady_clock::time_point> written;  // when this run last wrote one
  bool pending = false;                                          // an epoch ended since then
  auto checkpoint = [&] {
    write_checkpoint(dir, trainer.model(), state, callbacks, history);
    written = std::chrono::steady_clock::now();
    pending = false;
  };
  auto epoch_done = [&](const EpochResult& r) {
    if (on_epoch) on_epoch(r);
    state.history.assign(1, r);  // the last row, for the checkpoint and the summary
    if (writer) history.add(r);
    ++out.epochs_trained;
    out.train_seconds += r.seconds;
    for (const std::string& line : callbacks.on_epoch_end(r))
      if (control.on_message) control.on_message(line);
    state.next_epoch = r.epoch + 1;
    state.steps_done = 0;
    state.partial_sums = {};
    state.skipped_steps = 0;
    if (!writer) return;
    pending = true;
    if (!written ||
        std::chrono::duration<double>(std::chrono::steady_clock::now() - *written).count() >= c.checkpoint_seconds)
      checkpoint();
  };
  auto step_done = [&](std::int64_t step, std::int64_t steps, const MetricValues& running) {
    if (on_step) on_step(step, steps, running);
    callbacks.on_step_end(state.next_epoch, step, steps, running);
  };
  if (control.on_start) control.on_start(state.next_epoch);
  trainer.set_interrupt_flag(control.interrupt);
  trainer.set_keep_history(false);
  trainer.fit(data.train, &data.validation, c.epochs, c.batch_size, epoch_done, step_done,
              FitPosition{state.next_epoch, state.steps_done, state.partial_sums, state.skipped_steps});
  trainer.set_interrupt_flag(nullptr);
  // The last epoch's checkpoint, if it is still due (whether the run reached c.epochs or a callback stopped
  // it), before on_train_end restores any best weights. An interrupted run writes its own, mid-epoch.
  if (pending && !trainer.interrupted_at()) checkpoint();
}

// After the last epoch: the test metrics, the timing of the epochs this call trained, and the run directory's
// final files.
void finish_run(const TrainConfig& c, Trainer& trainer, const PreparedData& data,
                std::chrono::steady_clock::time_point start, TrainOutcome& out, bool writer, HistoryLog& history) {
  out.input_wait_seconds = trainer.input_wait_seconds();
  if (data.test.size() > 0) out.test = trainer.evaluate(data.test, c.batch_size);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.samples_per_second =
      out.train_seconds > 0 ? static_cast<double>(data.train.size() * out.epochs_trained) / out.train_seconds : 0.0;
  out.summary = run_summary(c, trainer.model(), data, out);
  if (!writer) return;

  const RunLayout run(c.output);
  const Sequential& net = trainer.model().net();
  save_safetensors(run.weights(), variable_values(net.variables()), {{"format", "tensorctl"}, {"model", net.name()}});
  history.flush();
  write_file_atomic(run.test_rows(), [&](PieceWriter write) {
    write_dataset_csv(write, data.test_raw, c.data.label, c.data.header, c.data.text ? c.data.text->column : "");
  });
  write_file_atomic(run.summary(), out.summary.dump(2) + "\n");
}

// A multi-worker run's MPI world, joined after its checks: started by mpirun, a build with MPI, workers
// that divide the batch, and the same resolved config on every rank. Null for the other strategies.
std::shared_ptr<MpiWorld> join_workers(const TrainConfig& c) {
  if (c.strategy.type != StrategyType::kMultiWorker) return nullptr;
  if (!mpi_built())
    throw SpecError(c.file, "strategy.type", "multi-worker needs a tensorctl built with MPI (libopenmpi-dev)");
  if (!mpi_launch())
    throw SpecError(c.file, "strategy.type",
                    "multi-worker runs one process per worker: start it with mpirun -np N tensorctl train " + c.file);
  auto world = MpiWorld::get(MpiWorld::Seconds(c.strategy.timeout_seconds));
  if (c.batch_size % world->members() != 0)
    throw SpecError(c.file, "batch_size",
                    fmt::format("{} workers do not divide batch_size {}: each worker takes an equal share of the "
                                "batch",
                                world->members(), c.batch_size));
  const std::vector<std::uint64_t> hashes =
      world->all_gather(fnv1a(c.to_json().dump()), "comparing the ranks' configs");
  for (std::size_t r = 1; r < hashes.size(); ++r)
    if (hashes[r] != hashes[0])
      throw SpecError(c.file, "",
                      fmt::format("rank {} resolved another config than rank 0 (hash {:016x}, rank 0's {:016x}): every "
                                  "worker must train the same config with the same flags",
                                  r, hashes[r], hashes[0]));
  return world;
}

// What a resume of a finished run to no more epochs than it trained reports: the run as its summary records it.
TrainOutcome finished_outcome(const RunLayout& run, const TrainingState& state) {
  TrainOutcome out;
  if (!state.history.empty()) out.last_epoch = state.history.back();
  out.first_epoch = state.next_epoch;
  out.summary = parse_json_file(run.summary().string());
  if (out.summary.is_object() && out.summary.contains("test") && out.summary.at("test").is_object())
    for (const auto& [k, v] : out.summary.at("test").items())
      if (v.is_number()) out.test.emplace_back(k, v.get<double>());
  return out;
}

}  // namespace

TrainOutcome train_and_save(const TrainConfig& config, const Trainer::EpochCallback& on_epoch,
                            const Trainer::StepCallback& on_step, const TrainControl& control) {
  TrainConfig c = config;
  if (!control.resume.empty()) c.output = control.resume.string();
  check_utf8_record(c);
  // Everything that can be wrong with the input is found before the run directory is touched.
  check_training_memory(Sequential::check(c.model_spec, c.model_file, c.model_path), c.batch_size,
                        c.optimizer.slots_per_weight(), c.file, "batch_size");
  // Multi-worker: rank 0 alone writes the run directory; every rank reads a checkpoint to resume.
  const std::shared_ptr<MpiWorld> workers = join_workers(c);
  const bool writer = !workers || workers->rank() == 0;
  std::unique_ptr<Model> model = build_model(c, true, workers);
  // A Keras model file's weights start a new run; a resumed one continues from its checkpoint instead.
  if (!c.keras_weights.empty() && control.resume.empty()) load_keras_weights(c.keras_weights, model->net());
  PreparedData data = prepare_data(c, model->net());
  if (!c.class_weight.is_null())
    model->set_class_weights(resolve_class_weights(c, data.train, model->options().class_weights.size()));
  if (data.streamed && !data.streamed->note.empty() && control.on_message) control.on_message(data.streamed->note);
  check_validation_monitors(c, data);
  const std::filesystem::path dir = c.output;
  const RunLayout run(dir);
  Trainer trainer(*model);
  Callbacks callbacks(c.callbacks, trainer, dir, learning_rate_control(model->optimizer()), writer);
  // Held until this function returns: no other process writes or reads the directory meanwhile.
  RunLock lock = writer ? own_run_directory(c, !control.resume.empty(), control.overwrite) : RunLock();
  TrainingState state;
  if (!control.resume.empty()) {
    try {
      state = resume_from_checkpoint(c, dir, data, *model, callbacks);
    } catch (const SpecError&) {
      lock.release_and_remove_if_created();
      throw;
    }
    if (writer) remove_stale_temporaries(dir, run_file_names(dir, c));
    // A finished run resumed to no more epochs than it trained: nothing to train, and nothing rewritten
    // (its summary once became "epochs 5, epochs_run 10" after `--resume --epochs 5` on a 10-epoch run).
    std::error_code ec;
    if (state.next_epoch > c.epochs && state.steps_done == 0 && std::filesystem::exists(run.summary(), ec))
      return finished_outcome(run, state);
  }
  HistoryLog history(run.history());
  if (writer && !control.resume.empty()) history.resume(state.next_epoch, state.history);
  if (state.history.size() > 1) state.history.erase(state.history.begin(), state.history.end() - 1);
  state.config = c.to_json();
  state.data = data.fingerprint;
  state.inputs = input_record(c, data);
  if (writer) write_file_atomic(run.model(), model->net().to_json().dump(2) + "\n");
  if (control.on_placement_warnings && !model->placement_warnings().empty())
    control.on_placement_warnings(model->placement_warnings());
  if (const std::string note = precision_note(c.precision, c.device); !note.empty() && control.on_message)
    control.on_message(note);
  const auto start = std::chrono::steady_clock::now();

  TrainOutcome out;
  out.first_epoch = state.next_epoch;
  fit_with_checkpoints(c, data, trainer, callbacks, state, on_epoch, on_step, control, writer, history, out);
  if (!state.history.empty()) out.last_epoch = state.history.back();
  if (trainer.interrupted_at()) {
    out.interrupted_at = trainer.interrupted_at();
    state.next_epoch = out.interrupted_at->epoch;
    state.steps_done = out.interrupted_at->steps_done;
    state.partial_sums = out.interrupted_at->sums;
    state.skipped_steps = out.interrupted_at->skipped_steps;
    if (writer) write_checkpoint(dir, *model, state, callbacks, history);
    return out;
  }
  // use_ema: from here on the weights are their averages (the checkpoint above keeps both).
  model->finalize_averages();
  const std::string restored = callbacks.on_train_end();
  if (!restored.empty() && control.on_message) control.on_message(restored);
  finish_run(c, trainer, data, start, out, writer, history);
  return out;
}

}  // namespace tctl
