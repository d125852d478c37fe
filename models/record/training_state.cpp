#include "models/record/training_state.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include <fmt/format.h>

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

constexpr const char* kDamaged = "damaged training state: ";

// A row's metrics as history_json writes them, [[name, value], ...]. A validation value that was not finite
// is written as null (JSON has no NaN; an infinite loss too) and reads back as NaN; training's are always
// finite, as a step with a non-finite loss ends the run.
std::vector<std::pair<std::string, double>> metrics_from_json(const nlohmann::json& list, const std::string& file,
                                                              const std::string& where, bool null_allowed) {
  if (!list.is_array())
    throw SpecError(file, where,
                    std::string(kDamaged) + "expected a list of [name, value] pairs, " + describe_json(list));
  std::vector<std::pair<std::string, double>> out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& p = list[i];
    if (!p.is_array() || p.size() != 2 || !p[0].is_string() || !(p[1].is_number() || (null_allowed && p[1].is_null())))
      throw SpecError(
          file, fmt::format("{}[{}]", where, i),
          std::string(kDamaged) +
              (null_allowed ? "expected a [name, value or null] pair, " : "expected a [name, number] pair, ") +
              describe_json(p));
    out.emplace_back(p[0].get<std::string>(),
                     p[1].is_null() ? std::numeric_limits<double>::quiet_NaN() : p[1].get<double>());
  }
  return out;
}

// The history, each value read with its type and range checked (1e39 epochs, 7.5 steps and a missing key
// are errors naming their place); check_state then asks that the rows are the epochs before the next.
std::vector<EpochResult> history_from_json(const nlohmann::json& j, const std::string& file, const std::string& where) {
  if (!j.is_array()) throw SpecError(file, where, std::string(kDamaged) + "expected a list, " + describe_json(j));
  std::vector<EpochResult> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    SpecReader row(j[i], file, fmt::format("{}[{}]", where, i), kDamaged);
    EpochResult r;
    r.epoch = row.non_negative_int("epoch");
    r.steps = row.non_negative_int("steps");
    r.seconds = row.number("seconds");
    r.train = metrics_from_json(row.raw("train"), file, row.path_of("train"), false);
    r.validation = metrics_from_json(row.raw("validation"), file, row.path_of("validation"), true);
    out.push_back(std::move(r));
  }
  return out;
}

nlohmann::json sums_json(const BatchSums& s) {
  return {{"loss", s.loss},           {"correct", s.correct},   {"top_k_correct", s.top_k_correct},
          {"abs_error", s.abs_error}, {"sq_error", s.sq_error}, {"examples", s.examples},
          {"values", s.values}};
}

BatchSums sums_from_json(const nlohmann::json& j, const std::string& file, const std::string& where) {
  SpecReader r(j, file, where, kDamaged);
  BatchSums s;
  s.loss = r.number("loss");
  s.correct = r.number("correct");
  s.top_k_correct = r.number("top_k_correct");
  s.abs_error = r.number("abs_error");
  s.sq_error = r.number("sq_error");
  s.examples = r.non_negative_int("examples");
  s.values = r.non_negative_int("values");
  return s;
}

nlohmann::json fingerprint_json(const DataFingerprint& f) {
  nlohmann::json j = {{"rows", f.rows}, {"hash", fmt::format("{:016x}", f.hash)}};
  if (f.columns) j["columns"] = fmt::format("{:016x}", *f.columns);
  return j;
}

DataFingerprint fingerprint_from_json(const nlohmann::json& j, const std::string& file, const std::string& where) {
  SpecReader r(j, file, where, kDamaged);
  DataFingerprint f;
  f.rows = r.non_negative_int("rows");
  auto hex_hash = [&r](const std::string& key) {
    const std::string hash = r.string(key);
    const bool hex = hash.size() == 16 && std::all_of(hash.begin(), hash.end(), [](char c) {
                       return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                     });
    if (!hex) r.fail(key, "expected 16 hexadecimal digits, got " + quote_for_message(hash));
    return static_cast<std::uint64_t>(std::stoull(hash, nullptr, 16));
  };
  f.hash = hex_hash("hash");
  if (r.has("columns")) f.columns = hex_hash("columns");
  r.finish();
  return f;
}

// The state a run could have reached: the history one row per finished epoch, 1 to next_epoch - 1 in order,
// and sums no run could have made refused, so a tampered state never becomes a run's history. The readers
// above have already refused counts below 0 and sums and seconds that are not finite.
void check_state(const TrainingState& state, const std::string& name) {
  auto fail = [&](const std::string& key, const std::string& what) {
    throw SpecError(name, "__metadata__." + key, "damaged training state: " + what);
  };
  if (state.next_epoch < 1) fail("next_epoch", fmt::format("epoch {} (epochs count from 1)", state.next_epoch));
  const auto rows = static_cast<std::int64_t>(state.history.size());
  if (rows > state.next_epoch - 1 || (rows == 0 && state.next_epoch > 1))
    fail("history", fmt::format("{} epochs recorded before epoch {}", rows, state.next_epoch));
  for (std::int64_t i = 0; i < rows; ++i) {
    const EpochResult& r = state.history[static_cast<std::size_t>(i)];
    const std::int64_t expected = state.next_epoch - rows + i;
    if (r.epoch != expected)
      fail("history", fmt::format("row {} is epoch {}, where epoch {} was expected", i + 1, r.epoch, expected));
    if (r.seconds < 0.0) fail("history", fmt::format("epoch {} has {} steps in {} s", r.epoch, r.steps, r.seconds));
  }
  const BatchSums& s = state.partial_sums;
  // A multi-output binary loss adds 1/width per output: the rounding of those sums may pass the count by an ulp.
  const double examples = static_cast<double>(s.examples) * (1.0 + 1e-9) + 1e-9;
  if (state.steps_done < 0) fail("steps_done", fmt::format("{} steps", state.steps_done));
  if (s.abs_error < 0 || s.sq_error < 0 || s.correct < 0 || s.correct > examples || s.top_k_correct < 0 ||
      s.top_k_correct > examples)
    fail("partial_sums", fmt::format("{} examples with {} classified right", s.examples, s.correct));
  if (state.steps_done == 0 && s.examples != 0) fail("partial_sums", "sums recorded before the epoch's first step");
  // Updates, not steps: under hogwild each step is several workers' updates, so only none taken bounds them.
  if (state.steps_done == 0 && state.skipped_steps != 0)
    fail("skipped_steps", fmt::format("{} updates skipped before the epoch's first step", state.skipped_steps));
}

}  // namespace

std::optional<std::int64_t> first_bad_element(const Tensor& t, bool nonnegative) {
  if (t.dtype() != DType::kF32) return std::nullopt;
  const float* v = t.data<float>();
  for (std::int64_t i = 0; i < t.num_elements(); ++i)
    if (!std::isfinite(v[i]) || (nonnegative && v[i] < 0.0f)) return i;
  return std::nullopt;
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
  // A count as save_training_checkpoint writes it: decimal digits and nothing else.
  auto count = [&](const char* key) {
    const std::string& text = meta(key);
    std::int64_t v = 0;
    bool ok = !text.empty() && text.size() <= 15;
    for (const char c : text) ok = ok && c >= '0' && c <= '9';
    if (ok) v = std::stoll(text);
    if (!ok)
      throw SpecError(name, std::string("__metadata__.") + key,
                      "damaged training state: expected a whole number, got " + quote_for_message(text));
    return v;
  };
  // The JSON kept under `key`, read by `from`, whose errors name their place under it.
  auto json_meta = [&](const char* key, auto from) {
    return from(parse_json_text(meta(key), name), name, std::string("__metadata__.") + key);
  };
  auto as_is = [](const nlohmann::json& j, const std::string&, const std::string&) { return j; };

  TrainingState state;
  state.next_epoch = count("next_epoch");
  state.steps_done = count("steps_done");
  // Checkpoints written before the sums were kept lack them: the resumed epoch then averages its
  // remaining steps only.
  if (file.metadata.count("partial_sums")) state.partial_sums = json_meta("partial_sums", sums_from_json);
  // Written since 2026-11-30: an older checkpoint resumes with 0, so an epoch it interrupted counts in its
  // row only the updates skipped after the resume.
  if (file.metadata.count("skipped_steps")) state.skipped_steps = count("skipped_steps");
  state.history = json_meta("history", history_from_json);
  state.callbacks = json_meta("callbacks", as_is);
  state.config = json_meta("config", as_is);
  // Checkpoints written before the data was recorded lack these keys: they resume unchecked, and predict
  // recomputes their scaling from the data.
  if (file.metadata.count("data")) {
    const nlohmann::json data = json_meta("data", as_is);
    if (!data.is_null()) state.data = fingerprint_from_json(data, name, "__metadata__.data");
  }
  if (file.metadata.count("inputs")) state.inputs = json_meta("inputs", as_is);
  check_state(state, name);
  return state;
}

std::map<std::string, std::string> training_state_metadata(const std::string& model, const TrainingState& state) {
  return {{"format", kFormat},
          {"model", model},
          {"next_epoch", std::to_string(state.next_epoch)},
          {"steps_done", std::to_string(state.steps_done)},
          {"partial_sums", sums_json(state.partial_sums).dump()},
          {"skipped_steps", std::to_string(state.skipped_steps)},
          {"history", history_json(state.history.empty() ? std::vector<EpochResult>{}
                                                         : std::vector<EpochResult>{state.history.back()})
                          .dump()},
          {"callbacks", state.callbacks.dump()},
          {"config", state.config.dump()},
          {"data", state.data ? fingerprint_json(*state.data).dump() : "null"},
          {"inputs", state.inputs.dump()}};
}

}  // namespace tctl
