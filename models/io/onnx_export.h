// ONNX export of a trained model (`tensorctl export RUN_DIR --format onnx`): the network as an ONNX graph
// (opset 17) built with the ONNX project's own protocol buffer classes (Debian's libonnx-dev), checked by its
// checker before it is returned.
//
// The graph takes the raw feature rows `predict` reads, [batch, F] float32 with a dynamic batch dimension;
// the input standardization comes first (Sub, Div), then a Reshape to the model's input_shape, then the
// network's nodes, which its layers add themselves (Layer::to_onnx, through models/io/onnx_writer.h). The
// output is what `predict` writes: the class probabilities, or the values.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/io/onnx_writer.h"

namespace tctl {

struct OnnxExportInput {
  std::string name = "model";             // the graph's name: the model's
  std::vector<std::int64_t> input_shape;  // the model's input shape, without the batch
  // Adds the network's nodes on the value `x` (the standardized rows in input_shape) and returns the name of
  // its output value (Sequential::to_onnx).
  std::function<std::string(OnnxWriter& w, const std::string& x)> add_network;
  std::vector<float> mean, std;  // the standardization of the features; empty: none
  std::int64_t outputs = 0;      // values per row of the model's output
  std::string output_name = "probabilities";
  std::string producer_version;
};

// The serialized ModelProto. Throws RuntimeError when the ONNX checker refuses the model (a bug here), and
// what add_network throws (a SpecError for a layer or activation ONNX has no form for).
std::string export_onnx(const OnnxExportInput& input);

}  // namespace tctl
