#include "models/io/onnx_export.h"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <map>

#include "core/errors.h"

namespace tctl {

namespace {

constexpr int kOpset = 17;

void set_attr(onnx::NodeProto* n, const OnnxAttr& attr) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(attr.name);
  if (const auto* i = std::get_if<std::int64_t>(&attr.value)) {
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(*i);
  } else if (const auto* f = std::get_if<float>(&attr.value)) {
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(*f);
  } else if (const auto* s = std::get_if<std::string>(&attr.value)) {
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(*s);
  } else if (const auto* list = std::get_if<std::vector<std::string>>(&attr.value)) {
    a->set_type(onnx::AttributeProto::STRINGS);
    for (const auto& v : *list) a->add_strings(v);
  } else {
    a->set_type(onnx::AttributeProto::INTS);
    for (auto v : std::get<std::vector<std::int64_t>>(attr.value)) a->add_ints(v);
  }
}

class Builder final : public OnnxWriter {
 public:
  onnx::GraphProto& graph() { return *model_.mutable_graph(); }
  onnx::ModelProto& model() { return model_; }

  // A fresh value name: "<base>", or "<base>_N" when taken.
  std::string fresh(const std::string& base) {
    const int n = used_[base]++;
    return n == 0 ? base : base + "_" + std::to_string(n);
  }

  std::string initializer(const std::string& name, const std::vector<std::int64_t>& dims,
                          const std::vector<float>& values) override {
    onnx::TensorProto* t = graph().add_initializer();
    const std::string id = fresh(name);
    t->set_name(id);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (auto d : dims) t->add_dims(d);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
    return id;
  }

  std::string int_initializer(const std::string& name, const std::vector<std::int64_t>& values) override {
    onnx::TensorProto* t = graph().add_initializer();
    const std::string id = fresh(name);
    t->set_name(id);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<std::int64_t>(values.size()));
    for (auto v : values) t->add_int64_data(v);
    return id;
  }

  std::string int_scalar(const std::string& name, std::int64_t value) override {
    onnx::TensorProto* t = graph().add_initializer();
    const std::string id = fresh(name);
    t->set_name(id);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_int64_data(value);
    return id;
  }

  std::string op(const std::string& type, const std::string& layer, const std::vector<std::string>& inputs,
                 const std::vector<OnnxAttr>& attrs) override {
    onnx::NodeProto* n = graph().add_node();
    n->set_op_type(type);
    n->set_name(fresh(layer + "/" + type));
    for (const auto& i : inputs) n->add_input(i);
    const std::string output = fresh(layer + "/" + type + ":0");
    n->add_output(output);
    for (const auto& a : attrs) set_attr(n, a);
    return output;
  }

 private:
  onnx::ModelProto model_;
  std::map<std::string, int> used_;
};

void set_io(onnx::ValueInfoProto* v, const std::string& name, std::int64_t width) {
  v->set_name(name);
  onnx::TypeProto_Tensor* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  t->mutable_shape()->add_dim()->set_dim_param("batch");
  t->mutable_shape()->add_dim()->set_dim_value(width);
}

}  // namespace

std::string export_onnx(const OnnxExportInput& in) {
  Builder b;
  OnnxWriter& w = b;
  onnx::ModelProto& model = b.model();
  model.set_ir_version(onnx::IR_VERSION);
  model.set_producer_name("tensorctl");
  model.set_producer_version(in.producer_version);
  onnx::OperatorSetIdProto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpset);
  b.graph().set_name(in.name);

  const std::vector<std::int64_t>& input_shape = in.input_shape;
  std::int64_t features = 1;
  for (auto d : input_shape) features *= d;
  set_io(b.graph().add_input(), "input", features);
  std::string x = "input";
  if (!in.mean.empty()) {
    x = w.op("Sub", "standardize", {x, w.initializer("standardize/mean", {features}, in.mean)});
    x = w.op("Div", "standardize", {x, w.initializer("standardize/std", {features}, in.std)});
  }
  if (input_shape.size() > 1) {
    std::vector<std::int64_t> shape{-1};
    shape.insert(shape.end(), input_shape.begin(), input_shape.end());
    x = w.op("Reshape", "input", {x, w.int_initializer("input/shape", shape)});
  }
  x = in.add_network(w, x);
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
