#include "models/train/callbacks.h"

#include <chrono>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/errors.h"
#include "models/io/event_file.h"
#include "models/io/spec_reader.h"

namespace tctl {

double Callback::monitored(const EpochResult& r) const {
  const bool val = config_.monitor.rfind("val_", 0) == 0;
  return metric(val ? r.validation : r.train, val ? config_.monitor.substr(4) : config_.monitor);
}

bool Callback::record(double value, std::int64_t epoch) {
  const bool better =
      std::isfinite(value) && (!watch_.has_best || (config_.maximize ? value > watch_.best + config_.min_delta
                                                                     : value < watch_.best - config_.min_delta));
  if (!better) {
    ++watch_.wait;
    return false;
  }
  watch_.best = value;
  watch_.has_best = true;
  watch_.best_epoch = epoch;
  watch_.wait = 0;
  return true;
}

nlohmann::json Callback::state() const {
  return {{"type", config_.type},
          {"best", watch_.best},
          {"has_best", watch_.has_best},
          {"wait", watch_.wait},
          {"cooldown_left", watch_.cooldown_left},
          {"best_epoch", watch_.best_epoch}};
}

// A checkpoint's state is checked as training could have written it: every key of state() present with its
// type, the counts not negative and the best value finite (record() keeps no other), so a tampered state is a
// SpecError naming the key, never an escaped JSON error or a wait that never reaches the patience.
void Callback::restore(const nlohmann::json& state, const std::string& where) {
  SpecReader r(state, "", where, "damaged training state: ");
  const std::string type = r.string("type");
  if (type != config_.type)
    r.fail_here("the state of a callback of type " + quote_for_message(type) + " where its config has " + config_.type);
  watch_.best = r.number("best");
  watch_.has_best = r.boolean("has_best");
  watch_.wait = r.non_negative_int("wait");
  watch_.cooldown_left = r.non_negative_int("cooldown_left");
  watch_.best_epoch = r.non_negative_int("best_epoch");
}

namespace {

std::string epochs_text(std::int64_t n) { return fmt::format("{} epoch{}", n, n == 1 ? "" : "s"); }

// Keras 3's EarlyStopping (keras/src/callbacks/early_stopping.py): stops once the wait reaches patience, but
// never after the first epoch (`epoch > 0` there, 0-based); with restore_best_weights, holds the best epoch's
// weights and puts them back at the end, and until an epoch improves (a NaN first epoch) the first epoch's,
// so a checkpoint always has them.
class EarlyStopping final : public Callback {
 public:
  EarlyStopping(const CallbackConfig& config, const CallbackContext& context)
      : Callback(config), trainer_(context.trainer), model_(context.trainer.model()) {}

  std::vector<std::string> on_epoch_end(const EpochResult& r) override {
    const bool better = record(monitored(r), r.epoch);
    if (config_.restore_best_weights && (better || best_weights_.empty())) {
      best_weights_ = model_.kept_weights();
      if (!better) watch_.best_epoch = r.epoch;
    }
    if (better || watch_.wait < config_.patience || r.epoch <= 1) return {};
    trainer_.stop_training();
    return {fmt::format("EarlyStopping: {} has not improved for {} (best {:.6g} at epoch {}); stopping",
                        config_.monitor, epochs_text(watch_.wait), watch_.best, watch_.best_epoch)};
  }

  std::string on_train_end() override {
    if (!config_.restore_best_weights || best_weights_.empty()) return "";
    for (const auto& v : model_.net().variables())
      for (const auto& t : best_weights_)
        if (t.name == v->name()) v->assign(t.value);
    if (!watch_.has_best) return fmt::format("EarlyStopping: restored the weights of epoch {}", watch_.best_epoch);
    return fmt::format("EarlyStopping: restored the weights of epoch {} ({} {:.6g})", watch_.best_epoch,
                       config_.monitor, watch_.best);
  }

  std::vector<NamedTensor> tensors() const override { return as_best(best_weights_); }
  // It holds best weights from the end of the first epoch on (best_epoch is set then); a run interrupted
  // during its first epoch has none.
  std::vector<NamedTensor> expected_tensors() const override {
    if (!config_.restore_best_weights || watch_.best_epoch == 0) return {};
    return as_best(variable_values(model_.net().variables()));
  }
  void restore_tensors(const SafetensorsFile& file) override {
    best_weights_.clear();
    for (const auto& t : file.tensors)
      if (t.name.rfind("best/", 0) == 0) best_weights_.push_back({t.name.substr(5), t.value});
  }

 private:
  static std::vector<NamedTensor> as_best(const std::vector<NamedTensor>& weights) {
    std::vector<NamedTensor> out;
    for (const auto& t : weights) out.push_back({"best/" + t.name, t.value});
    return out;
  }

  Trainer& trainer_;
  Model& model_;
  std::vector<NamedTensor> best_weights_;
};

// Saves the weights into the run directory whenever the monitored value improves (Keras' save_best_only).
class ModelCheckpoint final : public Callback {
 public:
  ModelCheckpoint(const CallbackConfig& config, const CallbackContext& context)
      : Callback(config),
        model_(context.trainer.model()),
        path_(context.run_dir / config.filename),
        write_(context.write_files) {}

  std::vector<std::string> on_epoch_end(const EpochResult& r) override {
    const double value = monitored(r);
    if (!record(value, r.epoch) || !write_) return {};
    save_safetensors(path_, model_.kept_weights(),
                     {{"format", "tensorctl"},
                      {"model", model_.net().name()},
                      {"epoch", std::to_string(r.epoch)},
                      {"monitor", config_.monitor},
                      {"value", fmt::format("{:.9g}", value)}});
    return {fmt::format("ModelCheckpoint: {} improved to {:.6g}; weights saved to {}", config_.monitor, value,
                        path_.string())};
  }

 private:
  Model& model_;
  std::filesystem::path path_;
  bool write_;
};

// Keras 3's ReduceLROnPlateau (keras/src/callbacks/reduce_lr_on_plateau.py).
class ReduceLROnPlateau final : public Callback {
 public:
  ReduceLROnPlateau(const CallbackConfig& config, const CallbackContext& context) : Callback(config), lr_(context.lr) {}

  std::vector<std::string> on_epoch_end(const EpochResult& r) override {
    const bool better = record(monitored(r), r.epoch);
    if (!lr_.current || !lr_.scale) return {};
    return reduce(better);
  }

 private:
  // Keras' order: a cooldown epoch first counts the cooldown down and clears the wait; an epoch that does not
  // improve counts towards patience only once the cooldown is over, the epoch that ends it included. The rate
  // is lowered (and the cooldown started) only while it is above min_lr.
  std::vector<std::string> reduce(bool better) {
    const bool was_cooling = watch_.cooldown_left > 0;
    if (was_cooling) --watch_.cooldown_left;
    if (better) return {};  // record() cleared the wait
    if (watch_.cooldown_left > 0) {
      watch_.wait = 0;
      return {};
    }
    if (was_cooling) watch_.wait = 1;  // the cooldown cleared it; this epoch counts
    if (watch_.wait < config_.patience) return {};
    const double now = lr_.current();
    if (!(static_cast<float>(now) > static_cast<float>(config_.min_lr))) return {};
    const double next = std::max(now * config_.factor, config_.min_lr);
    lr_.scale(next / now);
    const std::string line =
        fmt::format("ReduceLROnPlateau: {} has not improved for {}; learning rate {:.6g} -> {:.6g}", config_.monitor,
                    epochs_text(watch_.wait), now, next);
    watch_.wait = 0;
    watch_.cooldown_left = config_.cooldown;
    return {line};
  }

  LearningRateControl lr_;
};

// Appends the tensors of `more` whose names `out` does not hold yet.
void append_new(std::vector<NamedTensor>& out, std::vector<NamedTensor> more) {
  for (auto& t : more)
    if (std::none_of(out.begin(), out.end(), [&](const NamedTensor& o) { return o.name == t.name; }))
      out.push_back(std::move(t));
}

}  // namespace

// TensorBoard: scalar summaries in TensorBoard's event files (models/io/event_file.h), laid out as Keras'
// callback lays them out: <log_dir>/train and <log_dir>/validation, tags epoch_<metric> at step = epoch (as in
// history.csv), the learning rate as epoch_learning_rate, and with update_freq the running averages as
// batch_<metric> at step = the step of the run. Each process writes a file of its own (a resumed run adds one).
class TensorBoard final : public Callback {
 public:
  TensorBoard(CallbackConfig config, const CallbackContext& context)
      : Callback(std::move(config)),
        dir_(context.run_dir / config_.log_dir),
        lr_(context.lr),
        write_(context.write_files) {}

  std::vector<std::string> on_epoch_end(const EpochResult& r) override {
    if (!write_) return {};
    std::vector<std::pair<std::string, float>> train = scalars("epoch_", r.train);
    if (lr_.current) train.emplace_back("epoch_learning_rate", static_cast<float>(lr_.current()));
    writer(train_, "train").append({event_scalars(now(), r.epoch, train)});
    if (!r.validation.empty())
      writer(validation_, "validation").append({event_scalars(now(), r.epoch, scalars("epoch_", r.validation))});
    return {};
  }

  void on_step_end(std::int64_t epoch, std::int64_t step, std::int64_t steps, const MetricValues& running) override {
    const std::int64_t global = (epoch - 1) * steps + step;
    if (!write_ || config_.update_every == 0 || global % config_.update_every != 0) return;
    writer(train_, "train").append({event_scalars(now(), global, scalars("batch_", running))});
  }

 private:
  static std::vector<std::pair<std::string, float>> scalars(const std::string& prefix, const MetricValues& values) {
    std::vector<std::pair<std::string, float>> out;
    for (const auto& [name, v] : values) out.emplace_back(prefix + name, static_cast<float>(v));
    return out;
  }
  static double now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
  // Files are made when first written, so a run that trains nothing leaves none.
  EventFileWriter& writer(std::unique_ptr<EventFileWriter>& w, const char* part) {
    if (!w) w = std::make_unique<EventFileWriter>(dir_ / part);
    return *w;
  }

  std::filesystem::path dir_;
  LearningRateControl lr_;
  bool write_;
  std::unique_ptr<EventFileWriter> train_, validation_;
};

std::unique_ptr<Callback> make_callback(const CallbackConfig& config, const CallbackContext& context) {
  if (config.type == "TensorBoard") return std::make_unique<TensorBoard>(config, context);
  if (config.type == "EarlyStopping") return std::make_unique<EarlyStopping>(config, context);
  if (config.type == "ModelCheckpoint") return std::make_unique<ModelCheckpoint>(config, context);
  TCTL_CHECK(config.type == "ReduceLROnPlateau", "unknown callback type");
  return std::make_unique<ReduceLROnPlateau>(config, context);
}

Callbacks::Callbacks(const std::vector<CallbackConfig>& configs, Trainer& trainer, std::filesystem::path run_dir,
                     LearningRateControl lr, bool write_files) {
  const CallbackContext context{trainer, std::move(run_dir), std::move(lr), write_files};
  for (const auto& c : configs) callbacks_.push_back(make_callback(c, context));
}

std::vector<std::string> Callbacks::on_epoch_end(const EpochResult& r) {
  std::vector<std::string> lines;
  for (auto& cb : callbacks_)
    for (auto& line : cb->on_epoch_end(r)) lines.push_back(std::move(line));
  return lines;
}

void Callbacks::on_step_end(std::int64_t epoch, std::int64_t step, std::int64_t steps, const MetricValues& running) {
  for (auto& cb : callbacks_) cb->on_step_end(epoch, step, steps, running);
}

std::string Callbacks::on_train_end() {
  for (auto& cb : callbacks_) {
    std::string line = cb->on_train_end();
    if (!line.empty()) return line;
  }
  return "";
}

nlohmann::json Callbacks::state() const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& cb : callbacks_) out.push_back(cb->state());
  return out;
}

std::vector<NamedTensor> Callbacks::tensors() const {
  std::vector<NamedTensor> out;
  for (const auto& cb : callbacks_) append_new(out, cb->tensors());
  return out;
}

std::vector<NamedTensor> Callbacks::expected_tensors() const {
  std::vector<NamedTensor> out;
  for (const auto& cb : callbacks_) append_new(out, cb->expected_tensors());
  return out;
}

void Callbacks::restore_state(const nlohmann::json& state) {
  if (!state.is_array() || state.size() != callbacks_.size())
    throw SpecError("", "__metadata__.callbacks",
                    "damaged training state: the checkpoint holds other callbacks than its config lists");
  for (std::size_t i = 0; i < callbacks_.size(); ++i)
    callbacks_[i]->restore(state[i], "__metadata__.callbacks[" + std::to_string(i) + "]");
}

void Callbacks::restore_tensors(const SafetensorsFile& tensors) {
  for (const auto& cb : callbacks_) cb->restore_tensors(tensors);
}

}  // namespace tctl
