#include "models/train/training_checkpoint.h"

#include "core/errors.h"
#include "models/io/spec_reader.h"

namespace tctl {

namespace {

constexpr const char* kFormat = "tensorctl-checkpoint-1";

nlohmann::json history_json(const std::vector<EpochResult>& history) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : history) {
    nlohmann::json train = nlohmann::json::array(), validation = nlohmann::json::array();
    for (const auto& [k, v] : r.train) train.push_back({k, v});
    for (const auto& [k, v] : r.validation) validation.push_back({k, v});
    out.push_back(
        {{"epoch", r.epoch}, {"steps", r.steps}, {"seconds", r.seconds}, {"train", train}, {"validation", validation}});
  }
  return out;
}

std::vector<EpochResult> history_from_json(const nlohmann::json& j) {
  std::vector<EpochResult> out;
  for (const auto& e : j) {
    EpochResult r;
    r.epoch = e.at("epoch").get<std::int64_t>();
    r.steps = e.at("steps").get<std::int64_t>();
    r.seconds = e.at("seconds").get<double>();
    for (const auto& p : e.at("train")) r.train.emplace_back(p.at(0).get<std::string>(), p.at(1).get<double>());
    for (const auto& p : e.at("validation"))
      r.validation.emplace_back(p.at(0).get<std::string>(), p.at(1).get<double>());
    out.push_back(std::move(r));
  }
  return out;
}

nlohmann::json sums_json(const BatchSums& s) {
  return {{"loss", s.loss},           {"correct", s.correct},   {"top_k_correct", s.top_k_correct},
          {"abs_error", s.abs_error}, {"sq_error", s.sq_error}, {"examples", s.examples},
          {"values", s.values}};
}

BatchSums sums_from_json(const nlohmann::json& j) {
  BatchSums s;
  s.loss = j.at("loss").get<double>();
  s.correct = j.at("correct").get<double>();
  s.top_k_correct = j.at("top_k_correct").get<double>();
  s.abs_error = j.at("abs_error").get<double>();
  s.sq_error = j.at("sq_error").get<double>();
  s.examples = j.at("examples").get<std::int64_t>();
  s.values = j.at("values").get<std::int64_t>();
  return s;
}

}  // namespace

std::vector<NamedTensor> checkpoint_tensors(const Model& model) {
  std::vector<NamedTensor> out = variable_values(model.net().variables());
  for (auto& t : variable_values(model.optimizer().state())) out.push_back(std::move(t));
  return out;
}

void save_training_checkpoint(const std::filesystem::path& path, const Model& model, const TrainingState& state,
                              const std::vector<NamedTensor>& extra) {
  std::vector<NamedTensor> tensors = checkpoint_tensors(model);
  tensors.insert(tensors.end(), extra.begin(), extra.end());
  save_safetensors(path, tensors,
                   {{"format", kFormat},
                    {"model", model.net().name()},
                    {"next_epoch", std::to_string(state.next_epoch)},
                    {"steps_done", std::to_string(state.steps_done)},
                    {"partial_sums", sums_json(state.partial_sums).dump()},
                    {"history", history_json(state.history).dump()},
                    {"callbacks", state.callbacks.dump()},
                    {"config", state.config.dump()}});
}

bool is_training_checkpoint(const SafetensorsFile& file) {
  auto it = file.metadata.find("format");
  return it != file.metadata.end() && it->second == kFormat;
}

TrainingState read_training_checkpoint(const std::filesystem::path& path, SafetensorsFile& file) {
  const std::string name = path.string();
  file = load_safetensors(path);
  auto meta = [&](const char* key) -> const std::string& {
    auto it = file.metadata.find(key);
    if (it == file.metadata.end())
      throw SpecError(name, "header",
                      std::string("not a tensorctl training checkpoint: no \"") + key + "\" in __metadata__");
    return it->second;
  };
  if (meta("format") != kFormat)
    throw SpecError(
        name, "header",
        "not a tensorctl training checkpoint (format \"" + meta("format") + "\", expected " + kFormat + ")");

  TrainingState state;
  try {
    state.next_epoch = std::stoll(meta("next_epoch"));
    state.steps_done = std::stoll(meta("steps_done"));
    // Checkpoints written before the sums were kept lack them: the resumed epoch then averages its
    // remaining steps only.
    if (file.metadata.count("partial_sums"))
      state.partial_sums = sums_from_json(parse_json_text(meta("partial_sums"), name));
    state.history = history_from_json(parse_json_text(meta("history"), name));
    state.callbacks = parse_json_text(meta("callbacks"), name);
    state.config = parse_json_text(meta("config"), name);
  } catch (const SpecError&) {
    throw;
  } catch (const std::exception& e) {
    throw SpecError(name, "header", std::string("damaged training state: ") + e.what());
  }
  if (state.next_epoch < 1 || state.steps_done < 0)
    throw SpecError(name, "header",
                    "damaged training state: epoch " + std::to_string(state.next_epoch) + ", step " +
                        std::to_string(state.steps_done));
  return state;
}

void restore_training_checkpoint(const std::filesystem::path& path, const SafetensorsFile& file, Model& model,
                                 const std::vector<NamedTensor>& extra_expected) {
  std::vector<NamedTensor> expected = checkpoint_tensors(model);
  expected.insert(expected.end(), extra_expected.begin(), extra_expected.end());
  check_against(file, expected, path.string());
  assign_from(file, model.net().variables());
  assign_from(file, model.optimizer().state());
}

}  // namespace tctl
