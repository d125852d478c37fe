#include "models/io/onnx_export.h"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>

#include "core/errors.h"

namespace tctl {

namespace {

constexpr int kOpset = 17;

class Builder {
 public:
  explicit Builder(const OnnxExportInput& in) : in_(in) {}

  onnx::GraphProto& graph() { return *model_.mutable_graph(); }
  onnx::ModelProto& model() { return model_; }

  // A fresh value name: "<base>", or "<base>_N" when taken.
  std::string fresh(const std::string& base) {
    const int n = used_[base]++;
    return n == 0 ? base : base + "_" + std::to_string(n);
  }

  std::string initializer(const std::string& name, const std::vector<std::int64_t>& dims,
                          const std::vector<float>& values) {
    onnx::TensorProto* t = graph().add_initializer();
    const std::string id = fresh(name);
    t->set_name(id);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (auto d : dims) t->add_dims(d);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
    return id;
  }

  std::string int_initializer(const std::string& name, const std::vector<std::int64_t>& values) {
    onnx::TensorProto* t = graph().add_initializer();
    const std::string id = fresh(name);
    t->set_name(id);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<std::int64_t>(values.size()));
    for (auto v : values) t->add_int64_data(v);
    return id;
  }

  onnx::NodeProto* node(const std::string& op, const std::string& name, const std::vector<std::string>& inputs,
                        std::string* output) {
    onnx::NodeProto* n = graph().add_node();
    n->set_op_type(op);
    n->set_name(fresh(name + "/" + op));
    for (const auto& i : inputs) n->add_input(i);
    *output = fresh(name + "/" + op + ":0");
    n->add_output(*output);
    return n;
  }

  std::string op(const std::string& type, const std::string& name, const std::vector<std::string>& inputs) {
    std::string out;
    node(type, name, inputs, &out);
    return out;
  }

  const Tensor& weight(const std::string& name) const {
    auto it = in_.weights.find(name);
    if (it == in_.weights.end()) throw RuntimeError("ONNX export: the model has no variable \"" + name + "\"");
    return it->second;
  }

 private:
  const OnnxExportInput& in_;
  onnx::ModelProto model_;
  std::map<std::string, int> used_;
};

void set_ints(onnx::NodeProto* n, const char* name, const std::vector<std::int64_t>& values) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (auto v : values) a->add_ints(v);
}

void set_int(onnx::NodeProto* n, const char* name, std::int64_t value) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(value);
}

void set_float(onnx::NodeProto* n, const char* name, float value) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(value);
}

void set_string(onnx::NodeProto* n, const char* name, const std::string& value) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(value);
}

std::vector<float> values_of(const Tensor& t) { return t.to_floats(); }

std::vector<std::int64_t> dims_of(const Tensor& t) {
  return std::vector<std::int64_t>(t.shape().dims().begin(), t.shape().dims().end());
}

std::vector<std::int64_t> pair(const nlohmann::json& j) {
  if (j.is_number_integer()) return {j.get<std::int64_t>(), j.get<std::int64_t>()};
  return j.get<std::vector<std::int64_t>>();
}

// The activation `name` applied to x, as our kernels compute it (models/nn/activations.cpp).
std::string activation(Builder& b, const std::string& layer, const std::string& name, const std::string& x) {
  if (name == "linear") return x;
  if (name == "relu") return b.op("Relu", layer, {x});
  if (name == "sigmoid") return b.op("Sigmoid", layer, {x});
  if (name == "tanh") return b.op("Tanh", layer, {x});
  if (name == "softmax") {
    std::string out;
    set_int(b.node("Softmax", layer, {x}, &out), "axis", -1);
    return out;
  }
  if (name == "leaky_relu") {
    std::string out;
    set_float(b.node("LeakyRelu", layer, {x}, &out), "alpha", 0.2f);
    return out;
  }
  if (name == "elu") {
    std::string out;
    set_float(b.node("Elu", layer, {x}, &out), "alpha", 1.0f);
    return out;
  }
  if (name == "gelu") {
    // 0.5 x (1 + erf(x / sqrt 2)): the exact GELU (opset 20 has an operator; 17 does not).
    const std::string scaled = b.op("Mul", layer, {x, b.initializer(layer + "/inv_sqrt2", {}, {0.70710678f})});
    const std::string one_plus =
        b.op("Add", layer, {b.op("Erf", layer, {scaled}), b.initializer(layer + "/one", {}, {1.0f})});
    const std::string half_x = b.op("Mul", layer, {x, b.initializer(layer + "/half", {}, {0.5f})});
    return b.op("Mul", layer, {half_x, one_plus});
  }
  throw SpecError("model.json", layer, "ONNX export has no form for activation \"" + name + "\"");
}

// NHWC <-> NCHW around the convolutions and poolings.
std::string to_nchw(Builder& b, const std::string& layer, const std::string& x) {
  std::string out;
  set_ints(b.node("Transpose", layer, {x}, &out), "perm", {0, 3, 1, 2});
  return out;
}
std::string to_nhwc(Builder& b, const std::string& layer, const std::string& x) {
  std::string out;
  set_ints(b.node("Transpose", layer, {x}, &out), "perm", {0, 2, 3, 1});
  return out;
}

std::string auto_pad(const nlohmann::json& layer) {
  return layer.value("padding", "valid") == "same" ? "SAME_UPPER" : "VALID";
}

std::string add_layers(Builder& b, const nlohmann::json& layers, const std::string& prefix, std::string x);

std::string add_layer(Builder& b, const nlohmann::json& l, const std::string& prefix, const std::string& x) {
  const std::string type = l.at("type").get<std::string>();
  const std::string name = l.at("name").get<std::string>();
  const std::string var = prefix + name + "/";
  if (type == "Dense") {
    const Tensor& kernel = b.weight(var + "kernel");
    std::string y = b.op("MatMul", name, {x, b.initializer(var + "kernel", dims_of(kernel), values_of(kernel))});
    if (l.value("use_bias", true)) {
      const Tensor& bias = b.weight(var + "bias");
      y = b.op("Add", name, {y, b.initializer(var + "bias", dims_of(bias), values_of(bias))});
    }
    return activation(b, name, l.value("activation", "linear"), y);
  }
  if (type == "Conv2D") {
    // Keras' kernel [kh, kw, in, out] becomes ONNX's [out, in, kh, kw].
    const Tensor& kernel = b.weight(var + "kernel");
    const auto k = dims_of(kernel);
    const std::vector<float> src = values_of(kernel);
    std::vector<float> w(src.size());
    for (std::int64_t i = 0; i < k[0]; ++i)
      for (std::int64_t j = 0; j < k[1]; ++j)
        for (std::int64_t c = 0; c < k[2]; ++c)
          for (std::int64_t o = 0; o < k[3]; ++o)
            w[static_cast<std::size_t>(((o * k[2] + c) * k[0] + i) * k[1] + j)] =
                src[static_cast<std::size_t>(((i * k[1] + j) * k[2] + c) * k[3] + o)];
    std::vector<std::string> inputs{to_nchw(b, name, x), b.initializer(var + "kernel", {k[3], k[2], k[0], k[1]}, w)};
    if (l.value("use_bias", true)) {
      const Tensor& bias = b.weight(var + "bias");
      inputs.push_back(b.initializer(var + "bias", dims_of(bias), values_of(bias)));
    }
    std::string y;
    onnx::NodeProto* n = b.node("Conv", name, inputs, &y);
    set_ints(n, "kernel_shape", {k[0], k[1]});
    set_ints(n, "strides", pair(l.at("strides")));
    set_string(n, "auto_pad", auto_pad(l));
    return activation(b, name, l.value("activation", "linear"), to_nhwc(b, name, y));
  }
  if (type == "MaxPooling2D" || type == "AveragePooling2D") {
    std::string y;
    onnx::NodeProto* n = b.node(type == "MaxPooling2D" ? "MaxPool" : "AveragePool", name, {to_nchw(b, name, x)}, &y);
    set_ints(n, "kernel_shape", pair(l.at("pool_size")));
    set_ints(n, "strides", pair(l.at("strides")));
    set_string(n, "auto_pad", auto_pad(l));
    if (type == "AveragePooling2D") set_int(n, "count_include_pad", 0);
    return to_nhwc(b, name, y);
  }
  if (type == "Flatten") {
    std::string y;
    set_int(b.node("Flatten", name, {x}, &y), "axis", 1);
    return y;
  }
  if (type == "Reshape") {
    std::vector<std::int64_t> shape{0};
    for (auto d : l.at("target_shape")) shape.push_back(d.get<std::int64_t>());
    return b.op("Reshape", name, {x, b.int_initializer(name + "/shape", shape)});
  }
  if (type == "BatchNormalization") {
    const Tensor& mean = b.weight(var + "moving_mean");
    const std::vector<float> variance = values_of(b.weight(var + "moving_variance"));
    const double epsilon = l.value("epsilon", 1e-3);
    std::vector<float> scale(variance.size(), 1.0f), shift(variance.size(), 0.0f);
    if (l.value("scale", true)) scale = values_of(b.weight(var + "gamma"));
    if (l.value("center", true)) shift = values_of(b.weight(var + "beta"));
    // gamma * (1 / sqrt(variance + epsilon)), the inverse computed in double as the kernel does.
    for (std::size_t j = 0; j < scale.size(); ++j)
      scale[j] = scale[j] * static_cast<float>(1.0 / std::sqrt(static_cast<double>(variance[j]) + epsilon));
    const std::int64_t c = static_cast<std::int64_t>(scale.size());
    const std::string centred =
        b.op("Sub", name, {x, b.initializer(var + "moving_mean", dims_of(mean), values_of(mean))});
    const std::string scaled = b.op("Mul", name, {centred, b.initializer(var + "scale", {c}, scale)});
    return b.op("Add", name, {scaled, b.initializer(var + "shift", {c}, shift)});
  }
  if (type == "Activation") return activation(b, name, l.at("activation").get<std::string>(), x);
  if (type == "Dropout" || type == "Delay") return b.op("Identity", name, {x});
  if (type == "Parallel") {
    std::vector<std::string> ys;
    for (const auto& branch : l.at("branches")) ys.push_back(add_layers(b, branch, prefix + name + "/", x));
    if (l.value("merge", "concat") == "add") return b.op("Sum", name, ys);
    std::string y;
    set_int(b.node("Concat", name, ys, &y), "axis", -1);
    return y;
  }
  throw SpecError("model.json", name, "ONNX export has no form for layer type \"" + type + "\"");
}

std::string add_layers(Builder& b, const nlohmann::json& layers, const std::string& prefix, std::string x) {
  for (const auto& l : layers) x = add_layer(b, l, prefix, x);
  return x;
}

void set_io(onnx::ValueInfoProto* v, const std::string& name, std::int64_t width) {
  v->set_name(name);
  onnx::TypeProto_Tensor* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  t->mutable_shape()->add_dim()->set_dim_param("batch");
  t->mutable_shape()->add_dim()->set_dim_value(width);
}

}  // namespace

std::string export_onnx(const OnnxExportInput& in) {
  Builder b(in);
  onnx::ModelProto& model = b.model();
  model.set_ir_version(onnx::IR_VERSION);
  model.set_producer_name("tensorctl");
  model.set_producer_version(in.producer_version);
  onnx::OperatorSetIdProto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpset);
  const std::string net_name = in.spec.value("name", "model");
  b.graph().set_name(net_name);

  const auto input_shape = in.spec.at("input_shape").get<std::vector<std::int64_t>>();
  std::int64_t features = 1;
  for (auto d : input_shape) features *= d;
  set_io(b.graph().add_input(), "input", features);
  std::string x = "input";
  if (!in.mean.empty()) {
    x = b.op("Sub", "standardize", {x, b.initializer("standardize/mean", {features}, in.mean)});
    x = b.op("Div", "standardize", {x, b.initializer("standardize/std", {features}, in.std)});
  }
  if (input_shape.size() > 1) {
    std::vector<std::int64_t> shape{-1};
    shape.insert(shape.end(), input_shape.begin(), input_shape.end());
    x = b.op("Reshape", "input", {x, b.int_initializer("input/shape", shape)});
  }
  x = add_layers(b, in.spec.at("layers"), "", x);
  // The last node's output becomes the graph's output.
  onnx::NodeProto* last = b.graph().node_size() > 0 ? b.graph().mutable_node(b.graph().node_size() - 1) : nullptr;
  if (last != nullptr && last->output(0) == x) {
    last->set_output(0, in.output_name);
  } else {
    onnx::NodeProto* n = b.graph().add_node();
    n->set_op_type("Identity");
    n->set_name("output/Identity");
    n->add_input(x);
    n->add_output(in.output_name);
  }
  set_io(b.graph().add_output(), in.output_name, in.outputs);
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    throw RuntimeError(std::string("ONNX export: the ONNX checker refused the model: ") + e.what());
  }
  std::string bytes;
  if (!model.SerializeToString(&bytes)) throw RuntimeError("ONNX export: the model could not be serialized");
  return bytes;
}

}  // namespace tctl
