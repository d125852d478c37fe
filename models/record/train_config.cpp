#include "models/record/train_config.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <utility>

#include <fmt/format.h>

#include "core/device.h"
#include "core/errors.h"
#include "core/text.h"
#include "models/data/dataset.h"
#include "models/data/images.h"
#include "models/io/keras_import.h"
#include "models/io/spec_reader.h"
#include "models/nn/layer.h"
#include "models/nn/losses.h"
#include "models/record/keras_model_file.h"
#include "models/record/precision.h"

namespace tctl {

namespace {
constexpr std::array<std::pair<StrategyType, std::string_view>, 4> kStrategyNames{{
    {StrategyType::kNone, "none"},
    {StrategyType::kMirrored, "mirrored"},
    {StrategyType::kMultiWorker, "multi-worker"},
    {StrategyType::kHogwild, "hogwild"},
}};
}  // namespace

std::string_view strategy_type_name(StrategyType type) {
  for (const auto& [t, name] : kStrategyNames)
    if (t == type) return name;
  return "?";
}

nlohmann::json DataConfig::to_json() const {
  nlohmann::json j;
  if (!dataset.empty()) j["dataset"] = dataset;
  if (!csv.empty()) {
    j["csv"] = csv;
    j["label"] = label;
    if (!header) j["header"] = false;
    if (text) j["text"] = text->to_json();
  }
  if (dataset.empty()) {
    if (stream != Stream::kAuto) j["stream"] = stream == Stream::kOn;
    if (shuffle_buffer > 0) j["shuffle_buffer"] = shuffle_buffer;
    if (!cache.empty()) j["cache"] = cache;
  }
  if (!x.empty()) {
    j["x"] = x;
    j["y"] = y;
    if (!x_key.empty()) j["x_key"] = x_key;
    if (!y_key.empty()) j["y_key"] = y_key;
  }
  if (!images.empty()) {
    j["label"] = label;
    // Only what the config gave: a size or colour mode taken from the model is left to it again.
    const nlohmann::json resolved = image_options.to_json();
    j["images"] = {{"directory", images}, {"interpolation", resolved.at("interpolation")}};
    if (image_options.height > 0) j["images"]["image_size"] = resolved.at("image_size");
    if (image_options.channels > 0) j["images"]["color_mode"] = resolved.at("color_mode");
  }
  j["test_split"] = test_split;
  j["validation_split"] = validation_split;
  if (folds > 0) {
    j["folds"] = folds;
    j["fold"] = fold;
  }
  j["shuffle"] = shuffle;
  j["standardize"] = standardize;
  return j;
}

nlohmann::json StrategyConfig::to_json() const {
  nlohmann::json j{{"type", std::string(strategy_type_name(type))}};
  if (type == StrategyType::kHogwild) j["workers"] = workers;
  if (type == StrategyType::kMultiWorker) {
    j["bucket_bytes"] = bucket_bytes;
    j["timeout_seconds"] = timeout_seconds;
  }
  if (type == StrategyType::kMirrored) {
    j["replicas"] = replicas;
    j["devices"] = devices;
    j["bucket_bytes"] = bucket_bytes;
  }
  return j;
}

nlohmann::json TrainConfig::threads_json() const {
  nlohmann::json j{{"inter_op", inter_op_threads}, {"intra_op", intra_op_threads}};
  // Only when set: the runs recorded before it had none, and resolved configs print as they did.
  if (data_threads != 0) j["data"] = data_threads;
  return j;
}

nlohmann::json TrainConfig::to_json() const {
  nlohmann::json j{{"model", model_spec},
                   {"data", data.to_json()},
                   {"loss", loss},
                   {"optimizer", optimizer.to_json()},
                   {"metrics", metrics},
                   {"epochs", epochs},
                   {"batch_size", batch_size},
                   {"prefetch", prefetch},
                   {"checkpoint_seconds", checkpoint_seconds},
                   {"seed", seed},
                   {"threads", threads_json()},
                   {"callbacks", callbacks_json()},
                   {"device", device},
                   {"allow_tf32", allow_tf32},
                   {"keep_denormals", keep_denormals},
                   {"output", output}};
  // Absent without a strategy, as in the runs recorded before there were strategies (which may resume).
  if (strategy.type != StrategyType::kNone) j["strategy"] = strategy.to_json();
  if (!class_weight.is_null()) j["class_weight"] = class_weight;
  // Absent at float32, as in the runs recorded before there were precisions (which may resume).
  if (precision != "float32") j["precision"] = precision;
  if (device_graphs) j["device_graphs"] = true;
  if (optimizer.loss_scale.dynamic)
    j["loss_scale"] = {{"initial_scale", optimizer.loss_scale.initial_scale},
                       {"dynamic_growth_steps", optimizer.loss_scale.growth_steps}};
  return j;
}

const std::vector<std::string> kResumeMayChange{"epochs", "threads",     "prefetch",  "checkpoint_seconds",
                                                "output", "data.stream", "data.cache"};

namespace {

bool same_file(const nlohmann::json& a, const nlohmann::json& b) {
  if (!a.is_string() || !b.is_string()) return false;
  std::error_code ec;
  return std::filesystem::equivalent(a.get<std::string>(), b.get<std::string>(), ec) && !ec;
}

// Walks both values in step: objects key by key, lists element by element, so the change found is the
// innermost key that differs.
std::optional<ConfigChange> first_change(const nlohmann::json& before, const nlohmann::json& after,
                                         const std::string& key) {
  if (before.is_object() && after.is_object()) {
    std::vector<std::string> keys;
    for (const auto& [k, v] : before.items()) keys.push_back(k);
    for (const auto& [k, v] : after.items())
      if (!before.contains(k)) keys.push_back(k);
    // The model, then the data, before the other keys: when a run resumes another run's directory, they
    // say best what differs.
    auto rank = [&](const std::string& k) { return !key.empty() ? 2 : k == "model" ? 0 : k == "data" ? 1 : 2; };
    std::stable_sort(keys.begin(), keys.end(),
                     [&](const std::string& a, const std::string& b) { return rank(a) < rank(b); });
    for (const auto& k : keys) {
      const std::string path = json_path_key(key, k);
      if (std::find(kResumeMayChange.begin(), kResumeMayChange.end(), path) != kResumeMayChange.end()) continue;
      const nlohmann::json none;
      auto change =
          first_change(before.contains(k) ? before.at(k) : none, after.contains(k) ? after.at(k) : none, path);
      if (change) return change;
    }
    return std::nullopt;
  }
  if (before.is_array() && after.is_array() && before.size() == after.size()) {
    for (std::size_t i = 0; i < before.size(); ++i)
      if (auto change = first_change(before[i], after[i], key + "[" + std::to_string(i) + "]")) return change;
    return std::nullopt;
  }
  if (before == after || (key == "data.csv" && same_file(before, after))) return std::nullopt;
  return ConfigChange{key, before, after};
}

}  // namespace

std::optional<ConfigChange> find_resume_change(const nlohmann::json& before, const nlohmann::json& after) {
  return first_change(before, after, "");
}

void TrainConfig::set_precision(const std::string& policy) {
  precision = policy;
  optimizer.loss_scale.dynamic = policy == "mixed_float16";
}

std::vector<std::string> TrainConfig::input_files() const {
  std::vector<std::string> files;
  for (const std::string* f : {&file, &model_file, &keras_weights, &data.csv, &data.x, &data.y})
    if (!f->empty()) files.push_back(*f);
  return files;
}

nlohmann::json TrainConfig::callbacks_json() const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& cb : callbacks) out.push_back(cb.to_json());
  return out;
}

namespace {

// Why `path` is not the regular file a config's model or data file must be (the data file is read again to
// find a bad label's line, which a FIFO or a device cannot give twice): what stands there instead. The
// error_code overloads: a name too long or a loop of links is the user's mistake, reported with its reason,
// never a filesystem_error.
std::string not_regular_file_message(const std::string& what, const std::string& path) {
  using std::filesystem::file_type;
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  const std::string named = what + " " + path;
  switch (status.type()) {
    case file_type::directory:
      return named + " is a directory";
    case file_type::fifo:
      return named + " is a FIFO (a named pipe), not a regular file";
    case file_type::character:
      return named + " is a character device, not a regular file";
    case file_type::block:
      return named + " is a block device, not a regular file";
    case file_type::socket:
      return named + " is a socket, not a regular file";
    default:
      break;
  }
  if (ec && ec != std::errc::no_such_file_or_directory) return "cannot read " + named + ": " + ec.message();
  if (std::filesystem::exists(status)) return named + " is not a regular file";
  return named + " does not exist";
}

bool is_regular_file(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

// Where relative paths in a config point, and whether the files they name must exist now.
struct PathRules {
  std::filesystem::path base;
  bool check_files = true;
};

std::string resolved(const std::string& path, const PathRules& rules) {
  const std::filesystem::path p = path;
  return (p.is_absolute() ? p : rules.base / p).lexically_normal().string();
}

// "text": {"column": "text", "standardize": ..., "split": ..., "max_tokens": N, "output_sequence_length": L}.
TextOptions parse_text(SpecReader& data) {
  SpecReader r = data.object("text");
  TextOptions t;
  t.column = r.string("column", t.column);
  t.standardize = text_standardize_from_name(
      r.one_of("standardize", text_standardize_names(), std::string(text_standardize_name(t.standardize))));
  t.split = text_split_from_name(r.one_of("split", text_split_names(), std::string(text_split_name(t.split))));
  t.max_tokens = r.non_negative_int("max_tokens", 0);
  if (t.max_tokens == 1 || t.max_tokens > kMaxTextTokens)
    r.fail("max_tokens", fmt::format("expected 0 (the model's input_dim) or 2 to {} (padding and the "
                                     "out-of-vocabulary token count), got {}",
                                     kMaxTextTokens, t.max_tokens));
  t.output_sequence_length = r.non_negative_int("output_sequence_length", 0);
  r.finish();
  return t;
}

// "stream", "shuffle_buffer" and "cache" of a CSV's (of numbers or texts), arrays' or image folder's "data".
void parse_stream(SpecReader& r, const PathRules& rules, DataConfig& d) {
  if (r.has("stream")) {
    const nlohmann::json& v = r.raw("stream");
    if (v.is_boolean())
      d.stream = v.get<bool>() ? DataConfig::Stream::kOn : DataConfig::Stream::kOff;
    else if (!(v.is_string() && v.get<std::string>() == "auto"))
      r.fail("stream", "expected true, false or \"auto\", " + describe_json(v));
  }
  d.shuffle_buffer = r.has("shuffle_buffer") ? r.positive_int("shuffle_buffer") : 0;
  if (r.has("cache")) d.cache = resolved(r.string("cache"), rules);
}

// "images": {"directory": "photos", "image_size": [h, w], "color_mode": "rgb", "interpolation": "bilinear"};
// the size and the colour mode default to the model's input_shape, resolved in prepare_data.
void parse_images(SpecReader& data, const PathRules& rules, DataConfig& d) {
  SpecReader r = data.object("images");
  d.images = resolved(r.string("directory"), rules);
  std::error_code ec;
  if (rules.check_files && !std::filesystem::is_directory(d.images, ec))
    r.fail("directory", "no such folder: " + d.images + " (one subfolder of images per class)");
  if (r.has("image_size")) {
    const std::vector<std::int64_t> size = r.positive_int_list("image_size");
    if (size.size() != 2 || size[0] > kMaxImageSide || size[1] > kMaxImageSide)
      r.fail("image_size", fmt::format("expected [height, width], each 1 to {}", kMaxImageSide));
    d.image_options.height = size[0];
    d.image_options.width = size[1];
  }
  if (r.has("color_mode"))
    d.image_options.channels = r.one_of("color_mode", {"rgb", "grayscale"}, "rgb") == "rgb" ? 3 : 1;
  d.image_options.interpolation = r.one_of("interpolation", {"bilinear", "nearest"}, "bilinear") == "nearest"
                                      ? ImageInterpolation::kNearest
                                      : ImageInterpolation::kBilinear;
  r.finish();
}

DataConfig parse_data(SpecReader& top, const PathRules& rules) {
  DataConfig d;
  const auto& raw = top.raw("data");
  std::string dataset_path = top.path_of("data");
  if (raw.is_string()) {
    d.dataset = raw.get<std::string>();
  } else {
    SpecReader r = top.object("data");
    if (static_cast<int>(r.has("dataset")) + static_cast<int>(r.has("csv")) + static_cast<int>(r.has("x")) +
            static_cast<int>(r.has("images")) !=
        1)
      r.fail_here("give exactly one of \"dataset\", \"csv\", \"x\" (with \"y\") or \"images\"");
    if (r.has("dataset")) d.dataset = r.string("dataset");
    dataset_path = r.path_of("dataset");
    if (r.has("csv")) {
      d.csv = resolved(r.string("csv"), rules);
      if (rules.check_files && !is_regular_file(d.csv)) r.fail("csv", not_regular_file_message("data file", d.csv));
      d.label = r.string("label", "label");
      d.header = r.boolean("header", true);
      if (r.has("text")) d.text = parse_text(r);
    }
    if (r.has("x")) {
      if (!r.has("y")) r.fail_here("\"x\" needs \"y\": the labels or targets, an array with a row for each of x's");
      for (auto [key, path] : {std::pair{"x", &d.x}, std::pair{"y", &d.y}}) {
        *path = resolved(r.string(key), rules);
        if (rules.check_files && !is_regular_file(*path)) r.fail(key, not_regular_file_message("data file", *path));
      }
      d.x_key = r.string("x_key", "");
      d.y_key = r.string("y_key", "");
    }
    if (r.has("images")) {
      parse_images(r, rules, d);
      d.label = r.string("label", "label");  // the class's column in test.csv
      if (d.label == kImagePathColumn)
        r.fail("label", fmt::format("\"{}\" is the column of the image files in the run's test.csv; give the "
                                    "class's column another name",
                                    kImagePathColumn));
    }
    if (!r.has("dataset")) parse_stream(r, rules, d);
    d.test_split = r.number_in("test_split", 0.2, 0.0, 1.0);
    d.validation_split = r.number_in("validation_split", 0.1, 0.0, 1.0);
    if (r.has("folds") || r.has("fold")) {
      d.folds = r.positive_int("folds");
      d.fold = r.positive_int("fold");
      if (d.folds < 2 || d.folds > 1000) r.fail("folds", "expected 2 to 1000 folds");
      if (d.fold > d.folds) r.fail("fold", fmt::format("expected a fold of 1 to {} (\"folds\")", d.folds));
    }
    d.shuffle = r.boolean("shuffle", true);
    d.standardize = r.boolean("standardize", !d.text.has_value());
    r.finish();
  }
  if (!d.dataset.empty()) {
    auto names = builtin_dataset_names();
    if (std::find(names.begin(), names.end(), d.dataset) == names.end()) {
      throw SpecError(top.file(), dataset_path, "unknown dataset \"" + d.dataset + "\" (known: " + join(names) + ")");
    }
  }
  return d;
}

// The model spec inline, or read from the file the config names (a Keras export converted).
void parse_model(SpecReader& top, const PathRules& rules, TrainConfig& c) {
  const auto& model = top.raw("model");
  if (model.is_string()) {
    c.model_file = resolved(model.get<std::string>(), rules);
    // Named from the config, so the message says which reference is broken.
    if (!is_regular_file(c.model_file)) top.fail("model", not_regular_file_message("model file", c.model_file));
    if (is_keras_archive_or_h5(c.model_file)) {
      const KerasModelFile keras = read_keras_model_file(c.model_file);
      c.model_spec = keras_to_spec(keras.config, keras.place, keras_layer_mappings());
      c.keras_weights = c.model_file;
    } else {
      c.model_spec = model_spec_from(parse_json_file(c.model_file), c.model_file);
    }
    c.model_path = "";
  } else if (model.is_object()) {
    c.model_spec = model;
    c.model_file = top.file();
    c.model_path = top.path_of("model");
  } else {
    top.fail("model", "expected a model spec object or the path of a spec file, " + describe_json(model));
  }
}

std::vector<std::string> parse_metrics(SpecReader& top, const std::string& loss) {
  if (!top.has("metrics")) return {loss_metrics(loss).front()};
  const auto& m = top.raw("metrics");
  if (!m.is_array()) top.fail("metrics", "expected a list of metric names, " + describe_json(m));
  std::vector<std::string> out;
  for (std::size_t i = 0; i < m.size(); ++i) {
    if (!m[i].is_string())
      throw SpecError(top.file(), top.path_of("metrics") + "[" + std::to_string(i) + "]",
                      "expected a string, " + describe_json(m[i]));
    out.push_back(m[i].get<std::string>());
  }
  return out;
}

int thread_count(SpecReader& r, const std::string& key) {
  std::int64_t n = r.non_negative_int(key, 0);
  if (n > 1024) r.fail(key, "at most 1024 threads");
  return static_cast<int>(n);
}

// "precision" (Keras' policy names) and, with mixed_float16, "loss_scale" (Keras' LossScaleOptimizer's
// initial_scale and dynamic_growth_steps).
void parse_precision(SpecReader& top, TrainConfig& c) {
  c.set_precision(top.one_of("precision", precision_names(), "float32"));
  LossScaleConfig& ls = c.optimizer.loss_scale;
  // A skipped batch would leave its group's sum partial, and the update would still apply it.
  if (ls.dynamic && c.optimizer.gradient_accumulation_steps > 1)
    top.fail("precision",
             "mixed_float16's loss scaling skips a step whole, which gradient accumulation "
             "(optimizer.gradient_accumulation_steps > 1) cannot do yet: use one of them");
  if (!top.has("loss_scale")) return;
  if (!ls.dynamic)
    top.fail("loss_scale",
             "loss scaling is part of the mixed_float16 precision; this config's precision is " + c.precision);
  SpecReader l = top.object("loss_scale");
  // At most 2^126: the gradients are multiplied by the scale's reciprocal, which must stay a normal float.
  ls.initial_scale = l.number_in("initial_scale", ls.initial_scale, 1.0, 0x1p126, true);
  ls.growth_steps = l.has("dynamic_growth_steps") ? l.positive_int("dynamic_growth_steps") : ls.growth_steps;
  // The run of good steps is counted in a float, exact up to 2^24.
  if (ls.growth_steps > (std::int64_t{1} << 24))
    l.fail("dynamic_growth_steps", "at most 16777216 (2^24), got " + std::to_string(ls.growth_steps));
  l.finish();
}

// The keys after the metrics, in the order of to_json().
void parse_training_keys(SpecReader& top, TrainConfig& c, bool recorded) {
  // 0: no training step; the run evaluates and saves its starting weights (a Keras file's, say).
  c.epochs = top.non_negative_int("epochs", 10);
  c.batch_size = top.positive_int("batch_size", 32);
  c.prefetch = top.non_negative_int("prefetch", 2);
  if (c.prefetch > 64) top.fail("prefetch", "at most 64 batches ahead, got " + std::to_string(c.prefetch));
  c.checkpoint_seconds = top.number_in("checkpoint_seconds", 1.0, 0.0, 1e9, true);
  c.seed = static_cast<std::uint64_t>(top.non_negative_int("seed", 0));
  if (top.has("threads")) {
    SpecReader t = top.object("threads");
    c.inter_op_threads = thread_count(t, "inter_op");
    c.intra_op_threads = thread_count(t, "intra_op");
    c.data_threads = thread_count(t, "data");
    t.finish();
  }
  if (top.has("callbacks"))
    c.callbacks = parse_callbacks(top.raw("callbacks"), top.file(), c.metrics, c.data.validation_split > 0,
                                  top.path_of("callbacks"), /*new_run=*/!recorded);
  c.device = top.string("device", "cpu");
  if (const std::string error = device_name_error(c.device); !error.empty()) top.fail("device", error);
  c.allow_tf32 = top.boolean("allow_tf32", false);
  c.device_graphs = top.boolean("device_graphs", false);
  parse_precision(top, c);
}

// How many take a share of each batch (`key`: "replicas" or "workers"; 2 by default): 1 to 64, dividing it.
int batch_share_count(SpecReader& r, const std::string& key, std::int64_t batch_size) {
  const std::int64_t n = r.has(key) ? r.positive_int(key) : 2;
  if (n > 64) r.fail(key, fmt::format("at most 64 {}, got {}", key, n));
  if (batch_size % n != 0)
    r.fail(key, fmt::format("{} {} do not divide batch_size {}: each {} takes an equal share of the batch", n, key,
                            batch_size, key == "replicas" ? "replica" : "worker"));
  return static_cast<int>(n);
}

// "class_weight": "balanced", or an object of classes (indices or the data's label names) and their
// positive weights; which classes exist is the data's to say (resolve_class_weights).
nlohmann::json parse_class_weight(SpecReader& top) {
  if (!top.has("class_weight")) return nullptr;
  const nlohmann::json& w = top.raw("class_weight");
  if (w.is_string() && w.get<std::string>() == "balanced") return w;
  if (!w.is_object() || w.empty())
    top.fail("class_weight", "expected \"balanced\" or an object of classes and their weights, " + describe_json(w));
  for (const auto& [key, value] : w.items())
    if (!value.is_number() || !(value.get<double>() >= 0.0 && value.get<double>() < 1e30))
      throw SpecError(top.file(), top.path_of("class_weight") + "." + key,
                      "expected a weight of 0 or more, " + describe_json(value));
  return w;
}

StrategyType read_strategy_type(SpecReader& r) {
  std::vector<std::string> names;
  for (const auto& entry : kStrategyNames) names.emplace_back(entry.second);
  const std::string name = r.one_of("type", names, "none");
  for (const auto& [t, n] : kStrategyNames)
    if (n == name) return t;
  TCTL_CHECK(false, "one_of returned a name outside kStrategyNames");
  return StrategyType::kNone;
}

StrategyConfig parse_strategy(SpecReader& top, const TrainConfig& c) {
  StrategyConfig st;
  if (!top.has("strategy")) return st;
  SpecReader r = top.object("strategy");
  st.type = read_strategy_type(r);
  if (st.type == StrategyType::kNone) {
    r.finish({"type"});
    return st;
  }
  if (st.type == StrategyType::kHogwild) {
    st.workers = batch_share_count(r, "workers", c.batch_size);
    // Hogwild's workers each update on their own; a sum they all write into would be one more race.
    if (c.optimizer.gradient_accumulation_steps > 1)
      r.fail("type", "hogwild's workers update on their own: it does not take optimizer.gradient_accumulation_steps");
    r.finish({"type", "workers"});
    return st;
  }
  if (st.type == StrategyType::kMultiWorker) {
    st.bucket_bytes = r.positive_int("bucket_bytes", st.bucket_bytes);
    st.timeout_seconds = r.number_in("timeout_seconds", st.timeout_seconds, 0.001, 86400.0, true);
    r.finish({"type", "bucket_bytes", "timeout_seconds"});
    return st;
  }
  st.replicas = batch_share_count(r, "replicas", c.batch_size);
  if (r.has("devices")) {
    const auto& d = r.raw("devices");
    if (!d.is_array()) r.fail("devices", "expected a list of device names, one per replica, " + describe_json(d));
    if (d.size() != static_cast<std::size_t>(st.replicas))
      r.fail("devices", fmt::format("{} devices for {} replicas: name one device per replica", d.size(), st.replicas));
    for (std::size_t i = 0; i < d.size(); ++i) {
      const std::string where = r.path_of("devices") + "[" + std::to_string(i) + "]";
      if (!d[i].is_string()) throw SpecError(r.file(), where, "expected a device name, " + describe_json(d[i]));
      const std::string name = d[i].get<std::string>();
      if (const std::string error = device_name_error(name); !error.empty()) throw SpecError(r.file(), where, error);
      st.devices.push_back(name);
    }
  }
  st.bucket_bytes = r.positive_int("bucket_bytes", st.bucket_bytes);
  r.finish({"type", "replicas", "devices", "bucket_bytes"});
  return st;
}

}  // namespace

TrainConfig TrainConfig::from_json(const nlohmann::json& j, const std::string& file, const std::string& json_path,
                                   ConfigOrigin origin) {
  const bool recorded = origin == ConfigOrigin::kRunRecord;
  // A recorded config's paths were resolved when it was read, against the working directory of that run.
  const PathRules rules{recorded ? std::filesystem::path() : std::filesystem::path(file).parent_path(), !recorded};
  TrainConfig c;
  c.file = file;
  SpecReader top(j, file, json_path);
  parse_model(top, rules, c);
  c.data = parse_data(top, rules);
  c.loss = top.one_of("loss", loss_names(), "sparse_categorical_crossentropy");
  if (top.has("optimizer")) {
    SpecReader opt = top.object("optimizer");
    c.optimizer = OptimizerConfig::parse(opt);
  }
  c.metrics = parse_metrics(top, c.loss);
  c.class_weight = parse_class_weight(top);
  parse_training_keys(top, c, recorded);
  if (recorded) c.keep_denormals = top.boolean("keep_denormals", false);
  const std::string stem = std::filesystem::path(file).stem().string();
  c.output = top.string("output", (std::filesystem::path("runs") / stem).string());
  if (c.output.empty()) top.fail("output", "expected the run directory's path, got an empty string");
  c.strategy = parse_strategy(top, c);
  std::vector<std::string> known{"model",   "data",         "loss",      "optimizer",          "metrics",
                                 "epochs",  "batch_size",   "prefetch",  "checkpoint_seconds", "seed",
                                 "threads", "callbacks",    "device",    "allow_tf32",         "strategy",
                                 "output",  "class_weight", "precision", "loss_scale",         "device_graphs"};
  if (recorded) known.push_back("keep_denormals");
  top.finish(known);
  return c;
}

TrainConfig load_train_config(const std::string& path) { return TrainConfig::from_json(parse_json_file(path), path); }

ModelFileKind classify_model_file(const nlohmann::json& doc) {
  if (is_keras_model_json(doc)) return ModelFileKind::kKerasExport;
  if (doc.is_object() && doc.contains("model")) return ModelFileKind::kTrainConfig;
  return ModelFileKind::kSpec;
}

nlohmann::json model_spec_from(const nlohmann::json& doc, const std::string& file) {
  return classify_model_file(doc) == ModelFileKind::kKerasExport ? keras_to_spec(doc, file, keras_layer_mappings())
                                                                 : doc;
}

TrainConfig load_model_file(const std::string& path) {
  if (is_keras_archive_or_h5(path)) {
    const KerasModelFile keras = read_keras_model_file(path);
    TrainConfig c;
    c.file = path;
    c.model_file = path;
    c.model_spec = keras_to_spec(keras.config, keras.place, keras_layer_mappings());
    c.metrics = {"accuracy"};
    c.spec_only = true;
    return c;
  }
  const nlohmann::json doc = parse_json_file(path);
  if (classify_model_file(doc) == ModelFileKind::kTrainConfig) return TrainConfig::from_json(doc, path);
  TrainConfig c;
  c.file = path;
  c.model_file = path;
  c.model_spec = model_spec_from(doc, path);
  c.metrics = {"accuracy"};
  c.spec_only = true;
  return c;
}

InferenceOptions TrainConfig::inference_options() const {
  InferenceOptions o;
  o.loss = loss;
  o.metrics = metrics;
  o.device = strategy.type == StrategyType::kMirrored && !strategy.devices.empty() ? strategy.devices[0] : device;
  o.allow_tf32 = allow_tf32;
  o.device_graphs = device_graphs;
  o.compute_type = precision_compute_type(precision);
  o.seed = seed;
  o.config_file = file;
  o.placement.strict = strict_placement;
  if (log_device_placement)
    o.placement.log = [](const std::string& line) { std::fprintf(stderr, "placement: %s\n", line.c_str()); };
  return o;
}

}  // namespace tctl
