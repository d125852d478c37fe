// KerasConfig: reads one Keras layer's "config" object for the Keras importer (models/io/keras_import.h) and
// for the layers' own Keras mappings (each layer's file, listed in models/nn/layers/layers.def). Every key is
// marked as it is read; finish() refuses any key left that is not null, so an option the importer does not
// understand is reported rather than dropped. Errors are SpecError(file, JSON path of the key, "<who>: ...").
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tctl {

class KerasConfig {
 public:
  using json = nlohmann::json;

  // `config` must outlive the reader; `who` names the layer in messages ("Dense layer \"dense_1\"").
  KerasConfig(const json& config, std::string file, std::string path, std::string who);

  bool has(const std::string& key) const { return config_.contains(key); }
  const std::string& file() const { return file_; }
  std::string path_of(const std::string& key) const;

  // The value of `key`, or nullptr when absent; either way the key counts as read.
  const json* take(const std::string& key);
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;
  // For what is wrong with the layer as a whole: the message names the config object.
  [[noreturn]] void fail_here(const std::string& message) const;

  // Keys that must be absent or null: regularizers, constraints, noise shapes.
  void require_null(const std::initializer_list<const char*> keys);
  // Switches that must be absent or false (InputLayer's sparse, BatchNormalization's synchronized, ...).
  void require_false(const std::initializer_list<const char*> keys);
  // data_format absent, null or "channels_last".
  void require_channels_last();

  bool boolean(const std::string& key, bool fallback);
  double number(const std::string& key, double fallback);
  std::int64_t positive_int(const std::string& key);
  // A size Keras writes as an int or a pair ([3, 3]); always a pair in our spec.
  std::optional<json> int_pair(const std::string& key);
  // A 1-D size Keras writes as an int or a list of one ([3]).
  std::optional<std::int64_t> int_single(const std::string& key);
  std::string one_of(const std::string& key, const std::vector<std::string>& choices, const std::string& fallback);
  // Keras 2 writes activations as strings; Keras 3 may write a function as
  // {"module": "keras.activations", "class_name": "function", "config": "relu", ...}.
  // `supported` narrows the names accepted (and listed when one is refused) for a layer that takes fewer than
  // every activation; empty: all of them.
  std::string activation(const std::string& key, bool required, const std::vector<std::string>& supported = {});
  // An initializer as a string ("glorot_uniform") or a Keras object ({"class_name": "GlorotUniform", "config":
  // {"seed": null}}); the result is one of `allowed` (snake_case). A seed is accepted and not carried over:
  // tensorctl draws from its own seeded generator, so Keras' draws are not reproduced either way.
  std::string initializer(const std::string& key, const std::vector<std::string>& allowed, const std::string& fallback);

  // Keys every layer may carry that do not change the maths. Returns the layer's name ("" when unnamed).
  std::string common();
  // Refuses every key not read that is not null.
  void finish() const;

 private:
  // Keras 2.2 and older spelled glorot_uniform and he_normal as VarianceScaling with these settings.
  std::string variance_scaling_name(const std::string& key, const json& config) const;
  static bool is_float32(const json& v);
  static std::string describe_dtype(const json& v);

  const json& config_;
  std::string file_;
  std::string path_;
  std::string who_;
  std::set<std::string> used_;
};

// The initializers a Keras kernel or bias may name: "glorot_uniform", "he_normal", "orthogonal", "zeros".
const std::vector<std::string>& keras_weight_initializers();

// Keras' default embeddings initializer, RandomUniform(-0.05, 0.05), as a name or an object with those
// bounds (Keras and KerasHub save it as the object).
bool keras_default_uniform(const nlohmann::json& v);

// A list as to_json writes it, or the {"class_name": "__tuple__" or "TensorShape", "items": [...]} wrapping
// the metadata Keras 2 keeps beside SavedModels uses (people paste those too): the list itself.
const nlohmann::json& keras_list(const nlohmann::json& v);

// What the mappings share while walking a model's layer list: the number of dimensions (batch excluded) of
// the current layer's input, which BatchNormalization needs to tell whether its axis is the last one (a
// mapping that changes the rank, Flatten or Reshape, sets it to its output's), and Keras' padding mask.
struct KerasLayerWalk {
  std::size_t rank = 0;
  // Whether a padding mask (an Embedding's mask_zero) reaches the layer being read. The mapping of a layer
  // that makes one sets it.
  bool masked = false;
  // Set by take_mask() in the mapping of a layer Keras gives the mask to (supports_masking, or a mask
  // argument). Keras 3 warns where a mask reaches any other layer and drops it; keras_to_spec sets that
  // layer's ignore_mask, which does the same.
  bool mask_taken = false;
  // The layer takes the mask; it reaches the next layer when `passes` (Dense), not when the layer uses it up
  // (GlobalAveragePooling1D, an LSTM without return_sequences).
  void take_mask(bool passes) {
    mask_taken = true;
    masked = masked && passes;
  }
};

// A layer's Keras mapping: reads its Keras config `c` (after the keys every layer shares) into `out`, our
// spec entry, which already holds "type" and "name". Throws SpecError through `c` for what it cannot convert.
using KerasLayerMapping = void (*)(KerasConfig& c, nlohmann::json& out, KerasLayerWalk& walk);
// By Keras class name.
using KerasLayerMappings = std::map<std::string, KerasLayerMapping>;

}  // namespace tctl
