#include "models/sequential.h"

#include <map>
#include <set>

#include "core/errors.h"

namespace tctl {

Sequential Sequential::from_json(const nlohmann::json& spec, const std::string& file, const std::string& path,
                                 std::uint64_t seed, LockingMode locking) {
  Sequential m;
  m.file_ = file;
  m.path_ = path;
  SpecReader top(spec, file, path);
  m.name_ = top.string("name", "sequential");
  auto dims = top.positive_int_list("input_shape");
  if (dims.size() > static_cast<std::size_t>(Shape::kMaxRank - 1))
    top.fail("input_shape", "at most " + std::to_string(Shape::kMaxRank - 1) + " dimensions are supported");
  m.input_shape_ = Shape(std::span<const std::int64_t>(dims));
  const auto& layers = top.raw("layers");
  if (!layers.is_array() || layers.empty()) top.fail("layers", "expected a non-empty list of layers, " + describe_json(layers));
  top.finish({"name", "input_shape", "layers"});

  LayerNamer namer;
  for (const auto& l : layers) namer.reserve(l);
  std::set<std::string> names;
  Shape shape = m.input_shape_;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    SpecReader reader(layers[i], file, top.path_of("layers") + "[" + std::to_string(i) + "]");
    auto layer = make_layer(reader, namer.next(layers[i]));
    if (!names.insert(layer->name()).second) reader.fail("name", "duplicate layer name \"" + layer->name() + "\"");
    layer->set_locking_mode(locking);
    shape = layer->build(shape, BuildContext{seed, static_cast<int>(i)}, reader);
    m.output_shapes_.push_back(shape);
    m.layers_.push_back(std::move(layer));
  }
  return m;
}

Output Sequential::call(Graph& g, Output x, bool training, const std::string& default_device) const {
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const Layer& layer = *layers_[i];
    Graph::Scope scope(g, layer.name(), layer.device().empty() ? default_device : layer.device(), g.current_phase());
    try {
      x = layers_[i]->call(g, x, training);
    } catch (const ShapeError& e) {
      throw SpecError(file_, (path_.empty() ? "" : path_ + ".") + "layers[" + std::to_string(i) + "]", e.what());
    }
  }
  return x;
}

std::vector<std::shared_ptr<Variable>> Sequential::variables() const {
  std::vector<std::shared_ptr<Variable>> out;
  for (const auto& l : layers_)
    for (const auto& v : l->variables()) out.push_back(v);
  return out;
}

std::int64_t Sequential::param_count() const {
  std::int64_t n = 0;
  for (const auto& l : layers_) n += l->param_count();
  return n;
}

std::int64_t Sequential::trainable_param_count() const {
  std::int64_t n = 0;
  for (const auto& v : variables())
    if (v->trainable()) n += v->shape().num_elements();
  return n;
}

nlohmann::json Sequential::to_json() const {
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& l : layers_) layers.push_back(l->to_json());
  std::vector<std::int64_t> dims(input_shape_.dims().begin(), input_shape_.dims().end());
  return {{"name", name_}, {"input_shape", dims}, {"layers", layers}};
}

}  // namespace tctl
