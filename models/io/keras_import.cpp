#include "models/io/keras_import.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/errors.h"
#include "core/text.h"
#include "models/io/keras_config.h"
#include "models/io/spec_reader.h"

namespace tctl {
namespace {

using nlohmann::json;

// The input shape Keras wrote with its batch dimension first ([null, 8, 8, 1]), without that batch.
std::vector<std::int64_t> read_batch_shape(const json& value, const std::string& file, const std::string& path) {
  const json& v = keras_list(value);
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
  // KerasHub registers its own layers under its package's name: the library's classes, not a user's.
  for (const char* package : {"keras_hub>", "keras_nlp>"})
    if (registered.is_string() && object.at("class_name").is_string() &&
        registered.get<std::string>() == package + object.at("class_name").get<std::string>())
      return;
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
  // Keras 2's saving writes a registered class's registered name as its class_name: KerasNLP's layers come
  // as "keras_nlp>TransformerEncoder".
  for (const std::string package : {"keras_hub>", "keras_nlp>"})
    if (e.cls.starts_with(package)) e.cls.erase(0, package.size());
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
  // An InputLayer of whole numbers feeds token ids to an embedding; tensorctl holds them as floats, exactly
  // below 2^24, so int32 and int64 read as float32.
  json config = *e.config;
  if (config.is_object() && config.contains("dtype") && (config["dtype"] == "int32" || config["dtype"] == "int64"))
    config["dtype"] = "float32";
  KerasConfig c(config, file, e.path + ".config", e.who);
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

// "Activation, ..., InputLayer, ..., Reshape": the classes an import accepts, sorted.
std::string supported_layer_classes(const KerasLayerMappings& layers) {
  std::vector<std::string> names{"InputLayer"};
  for (const auto& [cls, mapping] : layers) names.push_back(cls);
  std::sort(names.begin(), names.end());
  return join(names);
}

}  // namespace

json keras_to_spec(const json& doc, const std::string& file, const KerasLayerMappings& layers) {
  check_sequential(doc, file);
  const SequentialHeader h = read_header(doc, file);
  std::optional<std::vector<std::int64_t>> input_shape;
  KerasLayerWalk walk;
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
    auto mapping = layers.find(e.cls);
    if (mapping == layers.end())
      throw SpecError(file, e.path,
                      "layer type " + e.cls + (e.name.empty() ? "" : " (\"" + e.name + "\")") +
                          " is not supported (supported: " + supported_layer_classes(layers) + ")");
    if (!input_shape) {
      input_shape = first_layer_shape(entry, e, h, file);
      walk.rank = input_shape->size();
    }
    KerasConfig c(*e.config, file, e.path + ".config", e.who);
    json out = json::object();
    out["type"] = e.cls;
    if (std::string n = c.common(); !n.empty()) out["name"] = n;
    const bool masked = walk.masked;
    walk.mask_taken = false;
    mapping->second(c, out, walk);
    c.finish();
    if (masked && !walk.mask_taken) {
      out["ignore_mask"] = true;
      walk.masked = false;
    }
    out_layers.push_back(std::move(out));
  }
  if (!input_shape)
    throw SpecError(file, h.layers_path,
                    "the Keras model has only an InputLayer; tensorctl needs at least one layer after it");
  return {{"name", h.name}, {"input_shape", *input_shape}, {"layers", out_layers}};
}

}  // namespace tctl
