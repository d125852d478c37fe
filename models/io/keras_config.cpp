#include "models/io/keras_config.h"

#include "core/errors.h"
#include "core/ops/activations.h"
#include "core/text.h"
#include "models/io/spec_reader.h"

namespace tctl {
namespace {

using nlohmann::json;

bool contains(const std::vector<std::string>& names, const std::string& name) {
  for (const auto& n : names)
    if (n == name) return true;
  return false;
}

// A Keras object is best named by its class ("got L2") rather than "got an object".
std::string describe_keras_value(const json& v) {
  if (v.is_object() && v.contains("class_name") && v.at("class_name").is_string())
    return "got " + v.at("class_name").get<std::string>();
  return describe_json(v);
}

// obj[key] when it is a string, else `fallback`; json::value() would throw on a value of another type.
std::string string_or(const json& obj, const std::string& key, const std::string& fallback) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : fallback;
}

// Keras initializer class names and the snake_case names both spellings map to.
const std::map<std::string, std::string>& initializer_classes() {
  static const std::map<std::string, std::string> names{{"GlorotUniform", "glorot_uniform"},
                                                        {"HeNormal", "he_normal"},
                                                        {"Orthogonal", "orthogonal"},
                                                        {"Zeros", "zeros"},
                                                        {"Ones", "ones"}};
  return names;
}

}  // namespace

const json& keras_list(const json& v) {
  if (v.is_object() && v.contains("class_name") && v.contains("items")) return v.at("items");
  return v;
}

const std::vector<std::string>& keras_weight_initializers() {
  static const std::vector<std::string> names{"glorot_uniform", "he_normal", "orthogonal", "zeros"};
  return names;
}

bool keras_default_uniform(const json& v) {
  if (v.is_string()) return v == "uniform" || v == "random_uniform" || v == "RandomUniform";
  if (!v.is_object() || v.value("class_name", "") != "RandomUniform") return false;
  const json config = v.value("config", json::object());
  return config.value("minval", -0.05) == -0.05 && config.value("maxval", 0.05) == 0.05;
}

KerasConfig::KerasConfig(const json& config, std::string file, std::string path, std::string who)
    : config_(config), file_(std::move(file)), path_(std::move(path)), who_(std::move(who)) {
  if (!config_.is_object()) throw SpecError(file_, path_, who_ + ": expected an object, " + describe_json(config_));
}

std::string KerasConfig::path_of(const std::string& key) const { return json_path_key(path_, key); }

void KerasConfig::require_channels_last() {
  const json* v = take("data_format");
  if (v && !v->is_null() && *v != json("channels_last"))
    fail("data_format", "data_format " + describe_json(*v).substr(4) +
                            " is not supported (tensorctl images are channels_last: [height, width, channels])");
}

const json* KerasConfig::take(const std::string& key) {
  used_.insert(key);
  auto it = config_.find(key);
  return it == config_.end() ? nullptr : &*it;
}

void KerasConfig::fail(const std::string& key, const std::string& message) const {
  throw SpecError(file_, path_of(key), who_ + ": " + message);
}

void KerasConfig::fail_here(const std::string& message) const { throw SpecError(file_, path_, who_ + ": " + message); }

void KerasConfig::require_null(const std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    const json* v = take(key);
    if (v && !v->is_null()) fail(key, std::string(key) + " is not supported (only null), " + describe_keras_value(*v));
  }
}

void KerasConfig::require_false(const std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    const json* v = take(key);
    if (v && !v->is_null() && *v != json(false))
      fail(key, std::string(key) + " is not supported (only false), " + describe_json(*v));
  }
}

bool KerasConfig::boolean(const std::string& key, bool fallback) {
  const json* v = take(key);
  if (!v || v->is_null()) return fallback;
  if (!v->is_boolean()) fail(key, "expected true or false, " + describe_json(*v));
  return v->get<bool>();
}

double KerasConfig::number(const std::string& key, double fallback) {
  const json* v = take(key);
  if (!v || v->is_null()) return fallback;
  if (!v->is_number()) fail(key, "expected a number, " + describe_json(*v));
  return v->get<double>();
}

std::int64_t KerasConfig::positive_int(const std::string& key) {
  const json* v = take(key);
  if (!v) fail(key, "missing required option " + key);
  if (!v->is_number_integer() || v->get<std::int64_t>() <= 0)
    fail(key, "expected a positive integer, " + describe_json(*v));
  return v->get<std::int64_t>();
}

std::optional<json> KerasConfig::int_pair(const std::string& key) {
  const json* raw = take(key);
  if (!raw || raw->is_null()) return std::nullopt;
  const json& v = keras_list(*raw);
  if (v.is_number_integer() && v.get<std::int64_t>() > 0) return json::array({v, v});
  if (v.is_array() && v.size() == 2 && v[0].is_number_integer() && v[1].is_number_integer() &&
      v[0].get<std::int64_t>() > 0 && v[1].get<std::int64_t>() > 0)
    return json::array({v[0], v[1]});
  fail(key, "expected a positive integer or a pair of them, " + describe_json(*raw));
}

std::optional<std::int64_t> KerasConfig::int_single(const std::string& key) {
  const json* raw = take(key);
  if (!raw || raw->is_null()) return std::nullopt;
  const json& v = keras_list(*raw);
  const json& n = v.is_array() && v.size() == 1 ? v[0] : v;
  if (n.is_number_integer() && n.get<std::int64_t>() > 0) return n.get<std::int64_t>();
  fail(key, "expected a positive integer or a list of one, " + describe_json(*raw));
}

std::string KerasConfig::one_of(const std::string& key, const std::vector<std::string>& choices,
                                const std::string& fallback) {
  const json* v = take(key);
  if (!v || v->is_null()) return fallback;
  if (!v->is_string() || !contains(choices, v->get<std::string>()))
    fail(key, key + " " + describe_json(*v).substr(4) + " is not supported (supported: " + join(choices) + ")");
  return v->get<std::string>();
}

std::string KerasConfig::activation(const std::string& key, bool required, const std::vector<std::string>& supported) {
  const json* v = take(key);
  if (!v) {
    if (required) fail(key, "missing required option " + key);
    return "linear";
  }
  std::string name;
  if (v->is_null()) {
    name = "linear";
  } else if (v->is_string()) {
    name = v->get<std::string>();
  } else if (v->is_object() && v->contains("config") && v->at("config").is_string()) {
    name = v->at("config").get<std::string>();
  } else if (v->is_object()) {
    // An object names its function in "config"; its class_name alone ("function", or a layer class such
    // as "ReLU") is not an activation's name.
    fail(key,
         "an activation object needs the function's name as a string in \"config\" (Keras writes "
         "{\"class_name\": \"function\", \"config\": \"relu\"} or just \"relu\"), " +
             describe_keras_value(*v) + " with " +
             (v->contains("config") ? describe_json(v->at("config")).substr(4) + " as its config" : "no config"));
  } else {
    fail(key, "an activation is a function's name (" + join(activation_names()) + "), " + describe_json(*v));
  }
  const std::vector<std::string>& names = supported.empty() ? activation_names() : supported;
  if (!contains(names, name)) fail(key, key + " \"" + name + "\" is not supported (supported: " + join(names) + ")");
  return name;
}

std::string KerasConfig::initializer(const std::string& key, const std::vector<std::string>& allowed,
                                     const std::string& fallback) {
  const json* v = take(key);
  if (!v || v->is_null()) return fallback;
  std::vector<std::string> allowed_classes;
  for (const auto& [cls, snake] : initializer_classes())
    if (contains(allowed, snake)) allowed_classes.push_back(cls);
  const std::string supported = " (supported: " + join(allowed_classes) + ")";
  std::string name;
  if (v->is_string()) {
    name = v->get<std::string>();
    auto it = initializer_classes().find(name);
    if (it != initializer_classes().end()) name = it->second;
  } else if (v->is_object() && v->contains("class_name") && v->at("class_name").is_string()) {
    const std::string cls = v->at("class_name").get<std::string>();
    const json empty = json::object();
    const json& config = v->contains("config") && !v->at("config").is_null() ? v->at("config") : empty;
    if (!config.is_object()) fail(key, "expected the initializer's config object, " + describe_json(config));
    std::set<std::string> read{"seed"};
    if (cls == "VarianceScaling") {
      name = variance_scaling_name(key, config);
      read.insert({"scale", "mode", "distribution"});
    } else {
      // Orthogonal's gain scales the matrix; only Keras' default, 1, is ours.
      if (cls == "Orthogonal" && config.contains("gain") && !config.at("gain").is_null()) {
        if (!(config.at("gain").is_number() && config.at("gain").get<double>() == 1.0))
          fail(key, "initializer Orthogonal with a gain other than 1 is not supported");
        read.insert("gain");
      }
      auto it = initializer_classes().find(cls);
      if (it == initializer_classes().end()) fail(key, "initializer " + cls + " is not supported" + supported);
      name = it->second;
    }
    for (auto it = config.begin(); it != config.end(); ++it)
      if (!read.contains(it.key()) && !it.value().is_null())
        fail(key, "initializer " + cls + " option " + it.key() + " is not supported");
    if (config.contains("seed") && !config.at("seed").is_null() && !config.at("seed").is_number_integer())
      fail(key, "expected an integer or null seed, " + describe_json(config.at("seed")));
  } else {
    fail(key, "expected an initializer name or object, " + describe_json(*v));
  }
  if (!contains(allowed, name)) fail(key, "initializer " + name + " is not supported here" + supported);
  return name;
}

std::string KerasConfig::common() {
  std::string name;
  if (const json* v = take("name"); v && !v->is_null()) {
    if (!v->is_string()) fail("name", "expected a string, " + describe_json(*v));
    name = v->get<std::string>();
  }
  if (const json* v = take("trainable"); v && *v != json(true))
    fail("trainable", "trainable " + v->dump() + " is not supported: tensorctl trains every layer");
  if (const json* v = take("dtype"); v && !v->is_null() && !is_float32(*v))
    fail("dtype", "dtype " + describe_dtype(*v) +
                      " is not supported: tensorctl's weights are float32 (a mixed_bfloat16 or mixed_float16 "
                      "policy is taken; a run's precision is its config's \"precision\")");
  // Read by the model for its input shape; on other layers Keras ignores it too.
  take("batch_input_shape");
  take("batch_size");
  return name;
}

void KerasConfig::finish() const {
  for (auto it = config_.begin(); it != config_.end(); ++it)
    if (!used_.contains(it.key()) && !it.value().is_null())
      fail(it.key(), "option " + it.key() + " is not supported (only null), " + describe_keras_value(it.value()));
}

std::string KerasConfig::variance_scaling_name(const std::string& key, const json& config) const {
  const json scale = config.value("scale", json(1.0));
  const std::string mode = string_or(config, "mode", "fan_in");
  const std::string distribution = string_or(config, "distribution", "truncated_normal");
  if (scale == json(1.0) && mode == "fan_avg" && distribution == "uniform") return "glorot_uniform";
  if (scale == json(2.0) && mode == "fan_in" && (distribution == "normal" || distribution == "truncated_normal"))
    return "he_normal";
  fail(key,
       "initializer VarianceScaling with these settings is not supported (only the glorot_uniform and he_normal "
       "forms)");
}

// float32, or a mixed policy, whose variables are float32 too: the layer's weights import as they are, and
// the precision a run computes in is the train config's (models/record/precision.h), not a layer's.
bool KerasConfig::is_float32(const json& v) {
  const auto float32_weights = [](const std::string& name) {
    return name == "float32" || name == "mixed_bfloat16" || name == "mixed_float16";
  };
  if (v.is_string()) return float32_weights(v.get<std::string>());
  // Keras 3.4+ DTypePolicy, or the mixed-precision Policy of Keras 2, naming its policy in config.name.
  return v.is_object() && v.contains("config") && v.at("config").is_object() &&
         float32_weights(string_or(v.at("config"), "name", ""));
}

std::string KerasConfig::describe_dtype(const json& v) {
  if (v.is_string()) return "\"" + v.get<std::string>() + "\"";
  if (v.is_object() && v.contains("config") && v.at("config").is_object() && v.at("config").contains("name"))
    return v.at("config").at("name").dump();
  return describe_json(v).substr(4);
}

}  // namespace tctl
