// Keras JSON import: turns the architecture JSON that Keras writes with `model.to_json()` for a Sequential
// model into a tensorctl model spec ({"name", "input_shape", "layers": [{"type": "Dense", ...}]}).
//
// Both layouts are read:
//   Keras 2 / tf.keras  {"class_name": "Sequential", "config": {"name", "layers": [...]}, "keras_version", ...};
//                       very old files hold the layer list directly in "config" and put `batch_input_shape`
//                       on the first real layer instead of an InputLayer.
//   Keras 3             every object is {"module", "class_name", "config", "registered_name"}, built layers add
//                       "build_config": {"input_shape"}, InputLayer has `batch_shape`, and dtype may be a
//                       DTypePolicy object.
// The file is Keras 3 when its top level has a "module" key, as Keras 3's own loader decides.
//
// Layers: InputLayer (becomes input_shape), and the classes of `layers`, each layer's own mapping (the layers'
// table is keras_layer_mappings() in models/nn/layer.h); their Keras keys map to ours under the same names. Nothing is
// dropped silently: an unsupported layer class, activation or initializer, a custom layer or model (a "module" outside
// keras, or a Keras 3 "registered_name" other than null or the class's own, "Custom>Dense"), a non-null
// regularizer or constraint, a Conv2D dilation or group count other than 1, channels_first, trainable false or a dtype
// other than float32 is a SpecError that names the layer and the option. Options without effect on the maths (name,
// trainable true, float32 dtype, initializer seeds) are accepted; other keys we do not know are accepted only when
// null.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "models/io/keras_config.h"

namespace tctl {

// True when `doc` looks like a Keras model file rather than a tensorctl spec: an object with a string
// "class_name" at the top level (our specs never have one). Says nothing about whether it can be imported.
bool is_keras_model_json(const nlohmann::json& doc);

// The tensorctl spec for the Keras Sequential model `doc`, read from `file` (used in messages only).
// Throws SpecError(file, JSON path inside the Keras file, message) for anything it cannot convert, e.g.
// `m.json: config.layers[2].config.kernel_regularizer: Dense layer "dense_1": ...`. Pure; thread-safe.
nlohmann::json keras_to_spec(const nlohmann::json& doc, const std::string& file, const KerasLayerMappings& layers);

// Which Keras wrote `doc`, for messages: "Keras 3" (Keras 3 writes no version into to_json), or
// "Keras 2 (keras 2.15.0, tensorflow backend)" from keras_version and backend. Call it on a document
// keras_to_spec accepted.
std::string keras_source_description(const nlohmann::json& doc);

}  // namespace tctl
