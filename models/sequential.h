// Sequential: a model spec parsed into an ordered stack of layers, built for its input shape.
//
// Spec JSON: {"name": "digits_mlp", "input_shape": [64], "layers": [{"type": "Dense", "units": 128, ...}]}.
// Not thread-safe to build; once built, call() may trace it into any number of graphs, which share the
// layers' variables.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/graph.h"
#include "models/layer.h"

namespace tctl {

class Sequential {
 public:
  // Parses and validates `spec` (errors name `file` and the JSON path under `path`), then builds every
  // layer, creating its variables with initializers seeded from `seed`.
  static Sequential from_json(const nlohmann::json& spec, const std::string& file, const std::string& path,
                              std::uint64_t seed, LockingMode locking = LockingMode::kMutex);

  const std::string& name() const { return name_; }
  // Without the batch dimension.
  const Shape& input_shape() const { return input_shape_; }
  const Shape& output_shape() const { return output_shapes_.back(); }
  const std::vector<Shape>& layer_output_shapes() const { return output_shapes_; }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }

  // Traces the stack on x into g. Each layer's nodes are placed on the layer's device, or on
  // `default_device`.
  Output call(Graph& g, Output x, bool training, const std::string& default_device) const;

  std::vector<std::shared_ptr<Variable>> variables() const;
  std::int64_t param_count() const;
  std::int64_t trainable_param_count() const;
  // The resolved spec: every key with its value, defaults included.
  nlohmann::json to_json() const;

 private:
  std::string name_;
  Shape input_shape_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<Shape> output_shapes_;
  std::string file_;
  std::string path_;
};

}  // namespace tctl
