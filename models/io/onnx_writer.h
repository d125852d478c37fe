// OnnxWriter: what a layer needs to add itself to an ONNX graph under construction, without seeing ONNX's
// protocol buffers. models/io/onnx_export.cpp implements it; each layer's Layer::to_onnx (models/nn) calls it.
//
// Values are named by strings. Every name a writer hands out is unique in the graph: a second "dense/MatMul"
// becomes "dense/MatMul_1". Nodes and initializers are appended in the order of the calls, which is the order
// they take in the file, so a layer's export is deterministic.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "core/tensor.h"

namespace tctl {

// One attribute of an ONNX node: an integer, a float, a string, a list of integers or of strings.
struct OnnxAttr {
  std::string name;
  std::variant<std::int64_t, float, std::string, std::vector<std::int64_t>, std::vector<std::string>> value;

  static OnnxAttr integer(std::string name, std::int64_t v) { return {std::move(name), v}; }
  static OnnxAttr real(std::string name, float v) { return {std::move(name), v}; }
  static OnnxAttr text(std::string name, std::string v) { return {std::move(name), std::move(v)}; }
  static OnnxAttr ints(std::string name, std::vector<std::int64_t> v) { return {std::move(name), std::move(v)}; }
  static OnnxAttr texts(std::string name, std::vector<std::string> v) { return {std::move(name), std::move(v)}; }
};

class OnnxWriter {
 public:
  virtual ~OnnxWriter() = default;
  // A float32 initializer of shape `dims` (row-major `values`) named `name`, made unique; returns its name.
  virtual std::string initializer(const std::string& name, const std::vector<std::int64_t>& dims,
                                  const std::vector<float>& values) = 0;
  // initializer() with a float32 tensor's shape and values.
  std::string weight(const std::string& name, const Tensor& t) {
    return initializer(name, std::vector<std::int64_t>(t.shape().dims().begin(), t.shape().dims().end()),
                       t.to_floats());
  }
  // A one-dimensional int64 initializer (a shape operand); returns its name.
  virtual std::string int_initializer(const std::string& name, const std::vector<std::int64_t>& values) = 0;
  // A scalar (0-D) int64 initializer, for the operands ONNX wants as scalars (CumSum's axis).
  virtual std::string int_scalar(const std::string& name, std::int64_t value) = 0;
  // Appends a node of ONNX operator `op`, named "<layer>/<op>", on `inputs`, with `attrs` in that order;
  // returns the name of its one output, "<layer>/<op>:0".
  virtual std::string op(const std::string& op, const std::string& layer, const std::vector<std::string>& inputs,
                         const std::vector<OnnxAttr>& attrs = {}) = 0;
};

// Our images are NHWC, ONNX's convolutions and poolings NCHW: the Transposes around them.
inline std::string onnx_to_nchw(OnnxWriter& w, const std::string& layer, const std::string& x) {
  return w.op("Transpose", layer, {x}, {OnnxAttr::ints("perm", {0, 3, 1, 2})});
}
inline std::string onnx_to_nhwc(OnnxWriter& w, const std::string& layer, const std::string& x) {
  return w.op("Transpose", layer, {x}, {OnnxAttr::ints("perm", {0, 2, 3, 1})});
}

}  // namespace tctl
