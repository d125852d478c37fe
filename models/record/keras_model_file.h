// A Keras model file as a train config's "model" or import-keras' input: the JSON of model.to_json(), a Keras 3
// .keras archive (a zip of config.json, metadata.json and model.weights.h5), or a legacy whole-model .h5 file
// (HDF5: the architecture in the root's "model_config" attribute, the weights under "model_weights").
//
// Weights, by what keras/src/saving/saving_lib.py and legacy_h5_format.py write:
//   .keras  each layer of the Sequential in the group "layers/<its class in snake_case>", "_1", "_2", ... for
//           the second and later layers of a class ("layers/dense_1"), its variables where the layer's
//           Layer::keras_weights() says ("vars/0", "cell/vars/1").
//   .h5     the group "model_weights/<layer name>", whose "weight_names" attribute lists the datasets, in
//           Keras' order (trainable, then the rest), which is our variables' order.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "models/nn/sequential.h"

namespace tctl {

enum class KerasFileKind { kJson, kKeras, kH5 };

struct KerasModelFile {
  KerasFileKind kind = KerasFileKind::kJson;
  nlohmann::json config;  // the architecture, as model.to_json() writes it
  std::string place;      // where it was read, for messages: "m.json", "m.keras (config.json)", "m.h5 (model_config)"
  bool has_weights() const { return kind != KerasFileKind::kJson; }
};

// Whether the file at `path` is a .keras archive or an HDF5 file, by its first bytes (a to_json() file is
// text, and read as any JSON file is). False for what is not a regular file: a pipe is read once, as JSON.
bool is_keras_archive_or_h5(const std::string& path);

// Reads the architecture of the Keras file at `path`. SpecError naming the file for what is no Keras model.
KerasModelFile read_keras_model_file(const std::string& path);

// Loads the weights of the .keras or .h5 file at `path` into `net` (built from that file's architecture),
// every variable of every layer. SpecError(file, dataset path, ...) for a missing dataset or one whose shape
// differs from the variable's, and for a dataset left over (a layer with more variables than ours).
void load_keras_weights(const std::string& path, const Sequential& net);

}  // namespace tctl
