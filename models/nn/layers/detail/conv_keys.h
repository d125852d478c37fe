// Private helper of the convolution layers (Conv1D, Conv2D): the keys they share besides their window, read
// from our spec, written back, and mapped from a Keras config.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "models/io/keras_config.h"
#include "models/io/spec_reader.h"
#include "models/nn/activations.h"
#include "models/nn/initializers.h"

namespace tctl::detail {

struct ConvKeys {
  std::int64_t filters = 0;
  std::string activation = "linear";
  bool use_bias = true;
  std::string kernel_init = "glorot_uniform", bias_init = "zeros";

  static ConvKeys read(SpecReader& spec) {
    ConvKeys k;
    k.filters = spec.positive_int("filters");
    if (!spec.has("kernel_size")) spec.fail_here("missing required key \"kernel_size\"");
    k.activation = spec.one_of("activation", activation_names(), "linear");
    k.use_bias = spec.boolean("use_bias", true);
    k.kernel_init = spec.one_of("kernel_initializer", initializer_names(), "glorot_uniform");
    k.bias_init = spec.one_of("bias_initializer", initializer_names(), "zeros");
    return k;
  }

  // Adds the shared keys to `config` (which holds the window's).
  nlohmann::json with(nlohmann::json config) const {
    config["filters"] = filters;
    config["activation"] = activation;
    config["use_bias"] = use_bias;
    config["kernel_initializer"] = kernel_init;
    config["bias_initializer"] = bias_init;
    return config;
  }

  // The shared keys of a Keras convolution into `out`; groups must be 1 and regularizers and constraints null.
  static void from_keras(KerasConfig& c, nlohmann::json& out) {
    out["filters"] = c.positive_int("filters");
    if (!c.has("kernel_size")) c.fail("kernel_size", "missing required option kernel_size");
    out["activation"] = c.activation("activation", false);
    out["use_bias"] = c.boolean("use_bias", true);
    out["kernel_initializer"] = c.initializer("kernel_initializer", keras_weight_initializers(), "glorot_uniform");
    out["bias_initializer"] = c.initializer("bias_initializer", keras_weight_initializers(), "zeros");
    c.require_channels_last();
    if (const nlohmann::json* groups = c.take("groups"); groups && !groups->is_null() && *groups != nlohmann::json(1))
      c.fail("groups", "groups " + groups->dump() + " is not supported (only 1)");
    c.require_null(
        {"kernel_regularizer", "bias_regularizer", "activity_regularizer", "kernel_constraint", "bias_constraint"});
  }
};

}  // namespace tctl::detail
