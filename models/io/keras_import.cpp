#include "models/io/keras_import.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <vector>

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

// to_json writes tuples as lists, but the metadata Keras 2 keeps beside SavedModels wraps them as
// {"class_name": "__tuple__" or "TensorShape", "items": [...]}; people paste those too.
const json& unwrap_list(const json& v) {
  if (v.is_object() && v.contains("class_name") && v.contains("items")) return v.at("items");
  return v;
}

const std::vector<std::string>& supported_layer_classes() {
  static const std::vector<std::string> names{
      "Activation", "AveragePooling2D", "BatchNormalization", "Conv2D",       "Dense",
      "Dropout",    "Flatten",          "InputLayer",         "MaxPooling2D", "Reshape"};
  return names;
}

// Keras initializer class names and the snake_case names both spellings map to.
const std::map<std::string, std::string>& initializer_classes() {
  static const std::map<std::string, std::string> names{
      {"GlorotUniform", "glorot_uniform"}, {"HeNormal", "he_normal"}, {"Zeros", "zeros"}, {"Ones", "ones"}};
  return names;
}

// The input shape Keras wrote with its batch dimension first ([null, 8, 8, 1]), without that batch.
std::vector<std::int64_t> read_batch_shape(const json& value, const std::string& file, const std::string& path) {
  const json& v = unwrap_list(value);
  if (!v.is_array() || v.size() < 2)
    throw SpecError(file, path,
                    "expected a shape with the batch dimension first, like [null, 28, 28, 1], " + describe_json(value));
  std::vector<std::int64_t> dims;
  for (std::size_t i = 1; i < v.size(); ++i) {
    const std::string where = path + "[" + std::to_string(i) + "]";
    if (v[i].is_null())
      throw SpecError(file, where,
                      "dimension " + std::to_string(i) + " of the input shape is None; tensorctl needs a fixed size");
    if (!v[i].is_number_integer() || v[i].get<std::int64_t>() <= 0)
      throw SpecError(file, where, "expected a positive integer, " + describe_json(v[i]));
    dims.push_back(v[i].get<std::int64_t>());
  }
  return dims;
}

// One Keras "config" object. Keys are marked as they are read; finish() refuses every key left over that is
// not null, so an option this importer does not understand is reported rather than dropped.
class KerasConfig {
 public:
  KerasConfig(const json& config, std::string file, std::string path, std::string who)
      : config_(config), file_(std::move(file)), path_(std::move(path)), who_(std::move(who)) {
    if (!config_.is_object()) throw SpecError(file_, path_, who_ + ": expected an object, " + describe_json(config_));
  }

  bool has(const std::string& key) const { return config_.contains(key); }
  std::string path_of(const std::string& key) const { return json_path_key(path_, key); }

  // The value of `key`, or nullptr when absent; either way the key counts as read.
  const json* take(const std::string& key) {
    used_.insert(key);
    auto it = config_.find(key);
    return it == config_.end() ? nullptr : &*it;
  }

  [[noreturn]] void fail(const std::string& key, const std::string& message) const {
    throw SpecError(file_, path_of(key), who_ + ": " + message);
  }

  // Keys that must be absent or null: regularizers, constraints, noise shapes.
  void require_null(const std::initializer_list<const char*> keys) {
    for (const char* key : keys) {
      const json* v = take(key);
      if (v && !v->is_null())
        fail(key, std::string(key) + " is not supported (only null), " + describe_keras_value(*v));
    }
  }

  // Switches that must be absent or false (InputLayer's sparse, BatchNormalization's synchronized, ...).
  void require_false(const std::initializer_list<const char*> keys) {
    for (const char* key : keys) {
      const json* v = take(key);
      if (v && !v->is_null() && *v != json(false))
        fail(key, std::string(key) + " is not supported (only false), " + describe_json(*v));
    }
  }

  bool boolean(const std::string& key, bool fallback) {
    const json* v = take(key);
    if (!v || v->is_null()) return fallback;
    if (!v->is_boolean()) fail(key, "expected true or false, " + describe_json(*v));
    return v->get<bool>();
  }

  double number(const std::string& key, double fallback) {
    const json* v = take(key);
    if (!v || v->is_null()) return fallback;
    if (!v->is_number()) fail(key, "expected a number, " + describe_json(*v));
    return v->get<double>();
  }

  std::int64_t positive_int(const std::string& key) {
    const json* v = take(key);
    if (!v) fail(key, "missing required option " + key);
    if (!v->is_number_integer() || v->get<std::int64_t>() <= 0)
      fail(key, "expected a positive integer, " + describe_json(*v));
    return v->get<std::int64_t>();
  }

  // A size Keras writes as an int or a pair ([3, 3]); always a pair in our spec.
  std::optional<json> int_pair(const std::string& key) {
    const json* raw = take(key);
    if (!raw || raw->is_null()) return std::nullopt;
    const json& v = unwrap_list(*raw);
    if (v.is_number_integer() && v.get<std::int64_t>() > 0) return json::array({v, v});
    if (v.is_array() && v.size() == 2 && v[0].is_number_integer() && v[1].is_number_integer() &&
        v[0].get<std::int64_t>() > 0 && v[1].get<std::int64_t>() > 0)
      return json::array({v[0], v[1]});
    fail(key, "expected a positive integer or a pair of them, " + describe_json(*raw));
  }

  std::string one_of(const std::string& key, const std::vector<std::string>& choices, const std::string& fallback) {
    const json* v = take(key);
    if (!v || v->is_null()) return fallback;
    if (!v->is_string() || !contains(choices, v->get<std::string>()))
      fail(key, key + " " + describe_json(*v).substr(4) + " is not supported (supported: " + join(choices) + ")");
    return v->get<std::string>();
  }

  // Keras 2 writes activations as strings; Keras 3 may write a function as
  // {"module": "keras.activations", "class_name": "function", "config": "relu", ...}.
  std::string activation(const std::string& key, bool required) {
    const json* v = take(key);
    if (!v) {
      if (required) fail(key, "missing required option " + key);
      return "linear";
    }
    if (v->is_null()) return "linear";
    std::string name;
    if (v->is_string()) {
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
    if (!contains(activation_names(), name))
      fail(key, "activation \"" + name + "\" is not supported (supported: " + join(activation_names()) + ")");
    return name;
  }

  // An initializer as a string ("glorot_uniform") or a Keras object ({"class_name": "GlorotUniform", "config":
  // {"seed": null}}); the result is one of `allowed` (snake_case). A seed is accepted and not carried over:
  // tensorctl draws from its own seeded generator, so Keras' draws are not reproduced either way.
  std::string initializer(const std::string& key, const std::vector<std::string>& allowed,
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

  // Keys every layer may carry that do not change the maths. Returns the layer's name ("" when unnamed).
  std::string common() {
    std::string name;
    if (const json* v = take("name"); v && !v->is_null()) {
      if (!v->is_string()) fail("name", "expected a string, " + describe_json(*v));
      name = v->get<std::string>();
    }
    if (const json* v = take("trainable"); v && *v != json(true))
      fail("trainable", "trainable " + v->dump() + " is not supported: tensorctl trains every layer");
    if (const json* v = take("dtype"); v && !v->is_null() && !is_float32(*v))
      fail("dtype", "dtype " + describe_dtype(*v) + " is not supported: tensorctl computes in float32");
    // Read by the model for its input shape; on other layers Keras ignores it too.
    take("batch_input_shape");
    take("batch_size");
    return name;
  }

  void finish() const {
    for (auto it = config_.begin(); it != config_.end(); ++it)
      if (!used_.contains(it.key()) && !it.value().is_null())
        fail(it.key(), "option " + it.key() + " is not supported (only null), " + describe_keras_value(it.value()));
  }

 private:
  // Keras 2.2 and older spelled glorot_uniform and he_normal as VarianceScaling with these settings.
  std::string variance_scaling_name(const std::string& key, const json& config) const {
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

  static bool is_float32(const json& v) {
    if (v.is_string()) return v.get<std::string>() == "float32";
    // Keras 3.4+ DTypePolicy, or the mixed-precision Policy of Keras 2, naming its compute dtype in config.name.
    return v.is_object() && v.contains("config") && v.at("config").is_object() &&
           string_or(v.at("config"), "name", "") == "float32";
  }

  static std::string describe_dtype(const json& v) {
    if (v.is_string()) return "\"" + v.get<std::string>() + "\"";
    if (v.is_object() && v.contains("config") && v.at("config").is_object() && v.at("config").contains("name"))
      return v.at("config").at("name").dump();
    return describe_json(v).substr(4);
  }

  const json& config_;
  std::string file_;
  std::string path_;
  std::string who_;
  std::set<std::string> used_;
};

const std::vector<std::string> kWeightInitializers{"glorot_uniform", "he_normal", "zeros"};

// What the converters share while walking the layer list: the number of dimensions (batch excluded) of the
// current layer's input, which BatchNormalization needs to tell whether its axis is the last one.
struct Walk {
  std::size_t rank = 0;
};

void require_channels_last(KerasConfig& c) {
  const json* v = c.take("data_format");
  if (v && !v->is_null() && *v != json("channels_last"))
    c.fail("data_format", "data_format " + describe_json(*v).substr(4) +
                              " is not supported (tensorctl images are channels_last: [height, width, channels])");
}

void convert_dense(KerasConfig& c, json& out, Walk&) {
  out["units"] = c.positive_int("units");
  out["activation"] = c.activation("activation", false);
  out["use_bias"] = c.boolean("use_bias", true);
  out["kernel_initializer"] = c.initializer("kernel_initializer", kWeightInitializers, "glorot_uniform");
  out["bias_initializer"] = c.initializer("bias_initializer", kWeightInitializers, "zeros");
  c.require_null(
      {"kernel_regularizer", "bias_regularizer", "activity_regularizer", "kernel_constraint", "bias_constraint"});
}

void convert_dropout(KerasConfig& c, json& out, Walk&) {
  const json* rate = c.take("rate");
  if (!rate) c.fail("rate", "missing required option rate");
  if (!rate->is_number() || rate->get<double>() < 0.0 || rate->get<double>() >= 1.0)
    c.fail("rate", "expected a number in [0, 1), " + describe_json(*rate));
  out["rate"] = *rate;
  c.require_null({"noise_shape", "seed"});
}

void convert_activation(KerasConfig& c, json& out, Walk&) { out["activation"] = c.activation("activation", true); }

void convert_conv2d(KerasConfig& c, json& out, Walk&) {
  out["filters"] = c.positive_int("filters");
  auto kernel = c.int_pair("kernel_size");
  if (!kernel) c.fail("kernel_size", "missing required option kernel_size");
  out["kernel_size"] = *kernel;
  out["strides"] = c.int_pair("strides").value_or(json::array({1, 1}));
  out["padding"] = c.one_of("padding", {"valid", "same"}, "valid");
  out["activation"] = c.activation("activation", false);
  out["use_bias"] = c.boolean("use_bias", true);
  out["kernel_initializer"] = c.initializer("kernel_initializer", kWeightInitializers, "glorot_uniform");
  out["bias_initializer"] = c.initializer("bias_initializer", kWeightInitializers, "zeros");
  require_channels_last(c);
  if (auto dilation = c.int_pair("dilation_rate"); dilation && *dilation != json::array({1, 1}))
    c.fail("dilation_rate", "dilation_rate " + dilation->dump() + " is not supported (only 1)");
  if (const json* groups = c.take("groups"); groups && !groups->is_null() && *groups != json(1))
    c.fail("groups", "groups " + groups->dump() + " is not supported (only 1)");
  c.require_null(
      {"kernel_regularizer", "bias_regularizer", "activity_regularizer", "kernel_constraint", "bias_constraint"});
}

void convert_pooling(KerasConfig& c, json& out, Walk&) {
  const json pool = c.int_pair("pool_size").value_or(json::array({2, 2}));
  out["pool_size"] = pool;
  // Keras' strides default (None) is the pool size.
  out["strides"] = c.int_pair("strides").value_or(pool);
  out["padding"] = c.one_of("padding", {"valid", "same"}, "valid");
  require_channels_last(c);
}

void convert_flatten(KerasConfig& c, json&, Walk& walk) {
  require_channels_last(c);
  walk.rank = 1;
}

void convert_reshape(KerasConfig& c, json& out, Walk& walk) {
  const json* raw = c.take("target_shape");
  if (!raw) c.fail("target_shape", "missing required option target_shape");
  const json& v = unwrap_list(*raw);
  bool ok = v.is_array() && !v.empty();
  int unknown = 0;
  for (std::size_t i = 0; ok && i < v.size(); ++i) {
    ok = v[i].is_number_integer() && (v[i].get<std::int64_t>() > 0 || v[i].get<std::int64_t>() == -1);
    if (ok && v[i].get<std::int64_t>() == -1) ++unknown;
  }
  if (!ok || unknown > 1)
    c.fail("target_shape", "expected a list of positive integers with at most one -1, " + describe_json(*raw));
  out["target_shape"] = v;
  walk.rank = v.size();
}

void convert_batch_norm(KerasConfig& c, json& out, Walk& walk) {
  // Keras writes -1 before the layer is built and the resolved index ([3] for an image) after; the index
  // counts the batch, so the last axis is `rank`.
  if (const json* raw = c.take("axis"); raw && !raw->is_null()) {
    const json& v = unwrap_list(*raw);
    const json& axis = v.is_array() && v.size() == 1 ? v[0] : v;
    const bool last = axis.is_number_integer() && (axis.get<std::int64_t>() == -1 ||
                                                   axis.get<std::int64_t>() == static_cast<std::int64_t>(walk.rank));
    if (!last) c.fail("axis", "axis " + raw->dump() + " is not supported (only the last axis, -1)");
  }
  out["axis"] = -1;
  out["momentum"] = c.number("momentum", 0.99);
  out["epsilon"] = c.number("epsilon", 0.001);
  out["center"] = c.boolean("center", true);
  out["scale"] = c.boolean("scale", true);
  c.initializer("beta_initializer", {"zeros"}, "zeros");
  c.initializer("gamma_initializer", {"ones"}, "ones");
  c.initializer("moving_mean_initializer", {"zeros"}, "zeros");
  c.initializer("moving_variance_initializer", {"ones"}, "ones");
  c.require_null({"beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint"});
  c.require_false({"synchronized", "renorm"});
  // Only used by renormalization, which is off once the line above passed.
  c.take("renorm_momentum");
}

using Converter = std::function<void(KerasConfig&, json&, Walk&)>;

const std::map<std::string, Converter>& converters() {
  static const std::map<std::string, Converter> table{{"Activation", convert_activation},
                                                      {"AveragePooling2D", convert_pooling},
                                                      {"BatchNormalization", convert_batch_norm},
                                                      {"Conv2D", convert_conv2d},
                                                      {"Dense", convert_dense},
                                                      {"Dropout", convert_dropout},
                                                      {"Flatten", convert_flatten},
                                                      {"MaxPooling2D", convert_pooling},
                                                      {"Reshape", convert_reshape}};
  return table;
}

// The "input_shape" of a Keras 3 build_config, when there is one.
const json* build_input_shape(const json& holder) {
  if (!holder.is_object() || !holder.contains("build_config")) return nullptr;
  const json& b = holder.at("build_config");
  if (!b.is_object() || !b.contains("input_shape") || b.at("input_shape").is_null()) return nullptr;
  return &b.at("input_shape");
}

}  // namespace

bool is_keras_model_json(const json& doc) {
  return doc.is_object() && doc.contains("class_name") && doc.at("class_name").is_string();
}

std::string keras_source_description(const json& doc) {
  if (!doc.is_object()) return "Keras";
  // keras_version decides when it is there: tf.keras 2.13+ already writes "module" keys in places.
  std::vector<std::string> details;
  std::string major;
  if (doc.contains("keras_version") && doc.at("keras_version").is_string()) {
    const std::string version = doc.at("keras_version").get<std::string>();
    major = version.substr(0, version.find('.'));
    details.push_back("keras " + version);
  }
  if (doc.contains("backend") && doc.at("backend").is_string())
    details.push_back(doc.at("backend").get<std::string>() + " backend");
  if (doc.contains("config") && doc.at("config").is_array()) details.push_back("legacy layer list");
  if (major.empty()) major = doc.contains("module") ? "3" : "2";
  return "Keras " + major + (details.empty() ? "" : " (" + join(details) + ")");
}

namespace {

// Keras 3 writes "registered_name": null for its own classes and "package>Name" ("Custom>Dense") for a class
// registered with register_keras_serializable: a user's subclass, which may keep the built-in class_name and
// module and compute anything. `who` names the object in the message, `kind` its kind in the plural.
void refuse_custom_class(const json& object, const std::string& file, const std::string& path, const std::string& who,
                         const std::string& kind) {
  if (!object.contains("registered_name")) return;
  const json& registered = object.at("registered_name");
  if (registered.is_null() || registered == object.at("class_name")) return;
  throw SpecError(file, path.empty() ? "registered_name" : path + ".registered_name",
                  who + ": registered as the custom class " +
                      (registered.is_string() ? quote_for_message(registered.get<std::string>())
                                              : describe_json(registered).substr(4)) +
                      "; custom " + kind + " are not supported (what it computes is in its Python code)");
}

// Refuses anything but a Keras Sequential model, each with its own message.
void check_sequential(const json& doc, const std::string& file) {
  if (!is_keras_model_json(doc))
    throw SpecError(file, "top level",
                    "not a Keras model file: expected an object with a \"class_name\", " + describe_json(doc));
  const std::string model_class = doc.at("class_name").get<std::string>();
  if (model_class == "Functional" || model_class == "Model")
    throw SpecError(file, "class_name",
                    "this is a Keras " + model_class +
                        " model; only Sequential models can be imported (rebuild it with keras.Sequential, or write a "
                        "tensorctl spec)");
  if (model_class != "Sequential")
    throw SpecError(file, "class_name",
                    "\"" + model_class + "\" is not a Keras Sequential model; only Sequential models can be imported");
  refuse_custom_class(doc, file, "", "Sequential model", "models");
  if (!doc.contains("config"))
    throw SpecError(file, "config", "missing: a Keras model file lists its layers under \"config\"");
}

// What a Sequential model's config says besides its layers: its name, where its layer list is, and the
// input shape it may keep for models without an InputLayer.
struct SequentialHeader {
  std::string name = "sequential";
  std::string layers_path = "config";
  const json* layers = nullptr;
  const json* model_shape = nullptr;
  std::string model_shape_path;
};

// Keras 2 and 3 keep {"name", "layers": [...], "build_input_shape"} under "config"; the oldest files keep
// the bare layer list there.
SequentialHeader read_header(const json& doc, const std::string& file) {
  const json& config = doc.at("config");
  SequentialHeader h;
  h.layers = &config;
  if (config.is_object()) {
    KerasConfig model(config, file, "config", "Sequential model");
    h.name = model.common();
    if (h.name.empty()) h.name = "sequential";
    const json* list = model.take("layers");
    if (!list || !list->is_array())
      model.fail("layers", "expected the list of layers, " + (list ? describe_json(*list) : "missing"));
    h.layers = list;
    h.layers_path = "config.layers";
    if (const json* s = model.take("build_input_shape"); s && !s->is_null()) {
      h.model_shape = s;
      h.model_shape_path = "config.build_input_shape";
    }
    model.finish();
  } else if (!config.is_array()) {
    throw SpecError(file, "config", "expected the model's config object, " + describe_json(config));
  }
  if (!h.model_shape && build_input_shape(doc)) {
    h.model_shape = build_input_shape(doc);
    h.model_shape_path = "build_config.input_shape";
  }
  if (h.layers->empty()) throw SpecError(file, h.layers_path, "the Keras model has no layers");
  return h;
}

// One entry of the layer list: its class, its config, and how messages name it.
struct LayerEntry {
  std::string path;
  std::string cls;
  const json* config;
  std::string name;
  std::string who;
};

LayerEntry read_entry(const json& entry, const std::string& file, const std::string& path) {
  static const json empty = json::object();
  if (!entry.is_object() || !entry.contains("class_name") || !entry.at("class_name").is_string())
    throw SpecError(file, path, "expected a Keras layer object with a \"class_name\", " + describe_json(entry));
  LayerEntry e{path, entry.at("class_name").get<std::string>(), entry.contains("config") ? &entry.at("config") : &empty,
               "", ""};
  if (entry.contains("module") && entry.at("module").is_string() &&
      !entry.at("module").get<std::string>().starts_with("keras"))
    throw SpecError(file, path + ".module",
                    "layer " + e.cls + " comes from module \"" + entry.at("module").get<std::string>() +
                        "\"; custom layers are not supported");
  if (e.config->is_object() && e.config->contains("name") && e.config->at("name").is_string())
    e.name = e.config->at("name").get<std::string>();
  e.who = e.cls + " layer" + (e.name.empty() ? "" : " \"" + e.name + "\"");
  refuse_custom_class(entry, file, path, e.who, "layers");
  return e;
}

// An InputLayer's shape, from batch_shape (Keras 3), batch_input_shape (Keras 2) or its build_config.
std::optional<std::vector<std::int64_t>> input_layer_shape(const json& entry, const LayerEntry& e,
                                                           const std::string& file) {
  KerasConfig c(*e.config, file, e.path + ".config", e.who);
  c.common();
  std::optional<std::vector<std::int64_t>> shape;
  const char* key = c.has("batch_shape") ? "batch_shape" : "batch_input_shape";
  if (const json* s = c.take(key); s && !s->is_null())
    shape = read_batch_shape(*s, file, c.path_of(key));
  else if (const json* s = build_input_shape(entry))
    shape = read_batch_shape(*s, file, e.path + ".build_config.input_shape");
  c.require_false({"sparse", "ragged", "optional"});
  c.finish();
  return shape;
}

// Without an InputLayer: older Keras 2 put the shape on the first layer, Keras 3 on its build_config, and
// both may keep it on the model.
std::vector<std::int64_t> first_layer_shape(const json& entry, const LayerEntry& e, const SequentialHeader& h,
                                            const std::string& file) {
  const json& config = *e.config;
  if (config.is_object() && config.contains("batch_input_shape") && !config.at("batch_input_shape").is_null())
    return read_batch_shape(config.at("batch_input_shape"), file, e.path + ".config.batch_input_shape");
  if (const json* s = build_input_shape(entry)) return read_batch_shape(*s, file, e.path + ".build_config.input_shape");
  if (h.model_shape) return read_batch_shape(*h.model_shape, file, h.model_shape_path);
  throw SpecError(file, h.layers_path,
                  "the Keras model has no input shape (it was saved before it was built); "
                  "start it with keras.Input(shape=...) and export it again");
}

}  // namespace

json keras_to_spec(const json& doc, const std::string& file) {
  check_sequential(doc, file);
  const SequentialHeader h = read_header(doc, file);
  std::optional<std::vector<std::int64_t>> input_shape;
  Walk walk;
  json out_layers = json::array();
  for (std::size_t i = 0; i < h.layers->size(); ++i) {
    const json& entry = (*h.layers)[i];
    const LayerEntry e = read_entry(entry, file, h.layers_path + "[" + std::to_string(i) + "]");
    if (e.cls == "InputLayer") {
      if (i != 0) throw SpecError(file, e.path, e.who + ": an InputLayer can only be the first layer");
      input_shape = input_layer_shape(entry, e, file);
      if (input_shape) walk.rank = input_shape->size();
      continue;
    }
    auto conv = converters().find(e.cls);
    if (conv == converters().end())
      throw SpecError(file, e.path,
                      "layer type " + e.cls + (e.name.empty() ? "" : " (\"" + e.name + "\")") +
                          " is not supported (supported: " + join(supported_layer_classes()) + ")");
    if (!input_shape) {
      input_shape = first_layer_shape(entry, e, h, file);
      walk.rank = input_shape->size();
    }
    KerasConfig c(*e.config, file, e.path + ".config", e.who);
    json out = json::object();
    out["type"] = e.cls;
    if (std::string n = c.common(); !n.empty()) out["name"] = n;
    conv->second(c, out, walk);
    c.finish();
    out_layers.push_back(std::move(out));
  }
  if (!input_shape)
    throw SpecError(file, h.layers_path,
                    "the Keras model has only an InputLayer; tensorctl needs at least one layer after it");
  return {{"name", h.name}, {"input_shape", *input_shape}, {"layers", out_layers}};
}

}  // namespace tctl
