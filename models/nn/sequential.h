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
#include "models/nn/layer.h"

namespace tctl {

class Sequential {
 public:
  // Parses and validates `spec` (errors name `file` and the JSON path under `path`), then builds every
  // layer, creating its variables with initializers seeded from `seed`. Refused with a SpecError before any
  // weight is allocated: a shape with more than kMaxTensorElements per example anywhere in the stack, and
  // weights that together need more than memory_limit_bytes() (the message says how much they need).
  static Sequential from_json(const nlohmann::json& spec, const std::string& file, const std::string& path,
                              std::uint64_t seed, LockingMode locking = LockingMode::kMutex);

  // The checks of from_json without building: throws the SpecError from_json would, allocates no weights,
  // and returns the model's size.
  struct Size {
    std::int64_t params = 0;
    std::int64_t activation_bytes_per_example = 0;
  };
  static Size check(const nlohmann::json& spec, const std::string& file, const std::string& path);

  // Bytes of float32 activations one example produces through the stack: every layer's output, and every
  // output inside a layer (each layer of a Parallel's branches).
  std::int64_t activation_bytes_per_example() const;

  const std::string& name() const { return name_; }
  // Without the batch dimension.
  const Shape& input_shape() const { return input_shape_; }
  const Shape& output_shape() const { return output_shapes_.back(); }
  const std::vector<Shape>& layer_output_shapes() const { return output_shapes_; }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  // The index of the layer that reads the model's inputs as token ids (Layer::token_ids): the first layer, or
  // the first after layers that only reshape (Layer::keeps_values); -1 when the inputs are numbers. The data,
  // predict's rows and profile's random batches are checked or made against it.
  std::ptrdiff_t id_layer() const;
  // That layer's token_ids(): an input must be a whole number below it. 0 when the inputs are numbers.
  std::int64_t input_token_ids() const;

  // Traces the stack on x into g. Each layer's nodes are placed on the layer's device, or on
  // `default_device`.
  Output call(Graph& g, Output x, bool training, const std::string& default_device) const;

  // Adds every layer's ONNX form (Layer::to_onnx) in order on the value x; returns the last output's name.
  std::string to_onnx(OnnxWriter& w, const std::string& x) const;

  std::vector<std::shared_ptr<Variable>> variables() const;
  std::int64_t param_count() const;
  std::int64_t trainable_param_count() const;
  // The resolved spec: every key with its value, defaults included.
  nlohmann::json to_json() const;

 private:
  // One pass of from_json; allocates the variables only when `budget.allocate` is set.
  static Sequential build_layers(const nlohmann::json& spec, const std::string& file, const std::string& path,
                                 std::uint64_t seed, LockingMode locking, MemoryBudget& budget);

  std::string name_;
  Shape input_shape_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<Shape> output_shapes_;
  // Whether each layer's input carries a mask (an Embedding with mask_zero before it, and every layer
  // between passing it on).
  std::vector<bool> masked_input_;
  std::string file_;
  std::string path_;
};

// Throws SpecError(`file`, `where`) when training a model of `size` with batches of `batch_size` and `optimizer_slots`
// slot tensors per weight would need more than memory_limit_bytes(): the weights, their gradients and slots,
// and one batch's activations with their gradients. Called before anything for training is allocated.
void check_training_memory(const Sequential::Size& size, std::int64_t batch_size, int optimizer_slots,
                           const std::string& file, const std::string& where);

}  // namespace tctl
