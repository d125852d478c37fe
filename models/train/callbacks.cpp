#include "models/train/callbacks.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/errors.h"

namespace tctl {

namespace {

double monitored(const EpochResult& r, const std::string& monitor) {
  const bool val = monitor.rfind("val_", 0) == 0;
  return metric(val ? r.validation : r.train, val ? monitor.substr(4) : monitor);
}

}  // namespace

Callbacks::Callbacks(std::vector<CallbackConfig> configs, Trainer& trainer, std::filesystem::path run_dir,
                     LearningRateControl lr)
    : trainer_(trainer),
      model_(trainer.model()), run_dir_(std::move(run_dir)), lr_(std::move(lr)) {
  for (auto& c : configs) watches_.push_back(Watch{std::move(c)});
}

bool Callbacks::improved(const Watch& w, double value) const {
  if (!std::isfinite(value)) return false;
  if (!w.has_best) return true;
  return w.config.maximize ? value > w.best + w.config.min_delta : value < w.best - w.config.min_delta;
}

std::vector<std::string> Callbacks::on_epoch_end(const EpochResult& r) {
  std::vector<std::string> lines;
  for (Watch& w : watches_) {
    const CallbackConfig& c = w.config;
    const double value = monitored(r, c.monitor);
    const bool better = improved(w, value);
    if (better) {
      w.best = value;
      w.has_best = true;
      w.best_epoch = r.epoch;
      w.wait = 0;
    } else {
      ++w.wait;
    }
    if (c.type == "EarlyStopping") {
      if (better && c.restore_best_weights) best_weights_ = variable_values(model_.net().variables());
      // Keras stops once `wait >= patience`: with patience 1, at the first epoch that does not improve.
      if (!better && w.wait >= c.patience) {
        trainer_.stop_training();
        lines.push_back(fmt::format("EarlyStopping: {} has not improved for {} epoch{} (best {:.6g} at epoch {}); stopping",
                                    c.monitor, w.wait, w.wait == 1 ? "" : "s", w.best, w.best_epoch));
      }
    } else if (c.type == "ModelCheckpoint") {
      if (better) {
        save_safetensors(run_dir_ / c.filename, variable_values(model_.net().variables()),
                         {{"format", "tensorctl"}, {"model", model_.net().name()}, {"epoch", std::to_string(r.epoch)},
                          {"monitor", c.monitor}, {"value", fmt::format("{:.9g}", value)}});
        lines.push_back(fmt::format("ModelCheckpoint: {} improved to {:.6g}; weights saved to {}", c.monitor, value,
                                    (run_dir_ / c.filename).string()));
      }
    } else if (lr_.current && lr_.scale) {
      reduce_on_plateau(w, better, lines);
    }
  }
  return lines;
}

// Keras' order: a cooldown epoch first counts the cooldown down and clears the wait; an epoch that does not
// improve counts towards patience only once the cooldown is over, the epoch that ends it included. The rate
// is lowered (and the cooldown started) only while it is above min_lr.
void Callbacks::reduce_on_plateau(Watch& w, bool better, std::vector<std::string>& lines) {
  const CallbackConfig& c = w.config;
  const bool was_cooling = w.cooldown_left > 0;
  if (was_cooling) --w.cooldown_left;
  if (better) return;  // on_epoch_end cleared the wait
  if (w.cooldown_left > 0) {
    w.wait = 0;
    return;
  }
  if (was_cooling) w.wait = 1;  // the cooldown cleared it; this epoch counts
  if (w.wait < c.patience) return;
  const double now = lr_.current();
  if (!(static_cast<float>(now) > static_cast<float>(c.min_lr))) return;
  const double next = std::max(now * c.factor, c.min_lr);
  lr_.scale(next / now);
  lines.push_back(fmt::format("ReduceLROnPlateau: {} has not improved for {} epoch{}; learning rate {:.6g} -> {:.6g}",
                              c.monitor, w.wait, w.wait == 1 ? "" : "s", now, next));
  w.wait = 0;
  w.cooldown_left = c.cooldown;
}

std::string Callbacks::on_train_end() {
  for (const Watch& w : watches_) {
    if (w.config.type != "EarlyStopping" || !w.config.restore_best_weights || best_weights_.empty()) continue;
    for (const auto& v : model_.net().variables())
      for (const auto& t : best_weights_)
        if (t.name == v->name()) v->assign(t.value);
    return fmt::format("EarlyStopping: restored the weights of epoch {} ({} {:.6g})", w.best_epoch, w.config.monitor, w.best);
  }
  return "";
}

nlohmann::json Callbacks::state() const {
  nlohmann::json out = nlohmann::json::array();
  for (const Watch& w : watches_)
    out.push_back({{"type", w.config.type}, {"best", w.best}, {"has_best", w.has_best}, {"wait", w.wait},
                   {"cooldown_left", w.cooldown_left}, {"best_epoch", w.best_epoch}});
  return out;
}

std::vector<NamedTensor> Callbacks::tensors() const {
  std::vector<NamedTensor> out;
  for (const auto& t : best_weights_) out.push_back({"best/" + t.name, t.value});
  return out;
}

std::vector<NamedTensor> Callbacks::expected_tensors() const {
  for (const Watch& w : watches_)
    if (w.config.type == "EarlyStopping" && w.config.restore_best_weights) {
      std::vector<NamedTensor> out;
      for (const auto& t : variable_values(model_.net().variables())) out.push_back({"best/" + t.name, t.value});
      return out;
    }
  return {};
}

void Callbacks::restore(const nlohmann::json& state, const SafetensorsFile& tensors) {
  if (!state.is_array() || state.size() != watches_.size())
    throw SpecError("", "callbacks", "the checkpoint was written with other callbacks than the config lists");
  for (std::size_t i = 0; i < watches_.size(); ++i) {
    Watch& w = watches_[i];
    const auto& s = state[i];
    if (s.at("type").get<std::string>() != w.config.type)
      throw SpecError("", "callbacks[" + std::to_string(i) + "]", "the checkpoint has a " + s.at("type").get<std::string>() +
                                                                     " here, the config a " + w.config.type);
    w.best = s.at("best").get<double>();
    w.has_best = s.at("has_best").get<bool>();
    w.wait = s.at("wait").get<std::int64_t>();
    w.cooldown_left = s.at("cooldown_left").get<std::int64_t>();
    w.best_epoch = s.at("best_epoch").get<std::int64_t>();
  }
  best_weights_.clear();
  for (const auto& t : tensors.tensors)
    if (t.name.rfind("best/", 0) == 0) best_weights_.push_back({t.name.substr(5), t.value});
}

}  // namespace tctl
