// ONNX export of a trained model (`tensorctl export RUN_DIR --format onnx`): the network as an ONNX graph
// (opset 17) built with the ONNX project's own protocol buffer classes (Debian's libonnx-dev), checked by its
// checker before it is returned.
//
// The graph takes the raw feature rows `predict` reads, [batch, F] float32 with a dynamic batch dimension;
// the input standardization comes first (Sub, Div), then a Reshape to the model's input_shape. Layers map
// one to a few ONNX nodes: Dense to MatMul and Add, Conv2D and the poolings to Conv, MaxPool and AveragePool
// between Transposes (our tensors are NHWC, ONNX's convolutions NCHW; "same" is SAME_UPPER, TF's rule),
// BatchNormalization to its inference form (x - mean) * gamma / sqrt(variance + epsilon) + beta, Flatten and
// Reshape to theirs, Activation to the ONNX operator of that name (GELU through Erf), Dropout and Delay to
// Identity, and Parallel to its branches joined by Concat or Sum. The output is what `predict` writes: the
// class probabilities, or the values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"

namespace tctl {

struct OnnxExportInput {
  nlohmann::json spec;                    // the resolved model spec (a run's model.json)
  std::map<std::string, Tensor> weights;  // every variable of the model, by name
  std::vector<float> mean, std;           // the standardization of the features; empty: none
  std::int64_t outputs = 0;               // values per row of the model's output
  std::string output_name = "probabilities";
  std::string producer_version;
};

// The serialized ModelProto. Throws RuntimeError when the ONNX checker refuses the model (a bug here) and
// SpecError(spec's file is unknown here, so "model.json") for a layer or activation ONNX has no form for.
std::string export_onnx(const OnnxExportInput& input);

}  // namespace tctl
