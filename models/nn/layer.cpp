#include "models/nn/layer.h"

#include <algorithm>
#include <cctype>

#include "core/errors.h"
#include "core/kernel_context.h"

namespace tctl {

std::uint64_t BuildContext::key(std::uint64_t salt) const {
  return mix64(seed ^ mix64(static_cast<std::uint64_t>(layer_index) + 1) ^ salt);
}

#define TCTL_LAYER(type, factory) std::unique_ptr<Layer> factory(LayerArgs& args);
#define TCTL_KERAS_LAYER(type, factory, keras) \
  TCTL_LAYER(type, factory)                    \
  void keras(KerasConfig& c, nlohmann::json& out, KerasLayerWalk& walk);
#include "models/nn/layers/layers.def"
#undef TCTL_KERAS_LAYER
#undef TCTL_LAYER

namespace {
struct LayerEntry {
  const char* type;
  LayerFactory factory;
  KerasLayerMapping keras;  // null: Keras files cannot hold the layer
};
constexpr LayerEntry kLayers[] = {
#define TCTL_LAYER(type, factory) {type, factory, nullptr},
#define TCTL_KERAS_LAYER(type, factory, keras) {type, factory, keras},
#include "models/nn/layers/layers.def"
#undef TCTL_KERAS_LAYER
#undef TCTL_LAYER
};
}  // namespace

const KerasLayerMappings& keras_layer_mappings() {
  static const KerasLayerMappings mappings = [] {
    KerasLayerMappings m;
    for (const auto& e : kLayers)
      if (e.keras != nullptr) m.emplace(e.type, e.keras);
    return m;
  }();
  return mappings;
}

std::vector<Layer::KerasWeight> Layer::keras_weights() const {
  std::vector<KerasWeight> out;
  for (std::size_t i = 0; i < variables_.size(); ++i) out.push_back({"vars/" + std::to_string(i)});
  return out;
}

std::int64_t Layer::param_count() const {
  std::int64_t n = 0;
  for (const auto& v : variables_) n += v->shape().num_elements();
  return n;
}

nlohmann::json Layer::to_json() const {
  nlohmann::json j = {{"type", type_}, {"name", name_}};
  if (!device_.empty()) j["device"] = device_;
  if (ignore_mask_) j["ignore_mask"] = true;
  const nlohmann::json own = config();
  for (const auto& [k, v] : own.items()) j[k] = v;
  return j;
}

std::string Layer::to_onnx(OnnxWriter&, const std::string&) const {
  throw SpecError("model.json", name_, "ONNX export has no form for layer type \"" + type_ + "\"");
}

std::string Layer::to_onnx_masked(OnnxWriter&, const std::string&, const std::string&) const {
  throw SpecError("model.json", name_, "ONNX export has no form for layer type \"" + type_ + "\" with a padding mask");
}

Tensor Layer::value(const std::string& short_name) const {
  const std::string full = variable_name(short_name);
  for (const auto& v : variables_)
    if (v->name() == full) return v->read();
  TCTL_CHECK(false, "layer " + name_ + " has no variable " + full);
}

std::shared_ptr<Variable> Layer::add_variable(const BuildContext& ctx, const std::string& short_name,
                                              const Shape& shape, FunctionRef<Tensor()> init, bool trainable) {
  if (ctx.budget != nullptr) {
    ctx.budget->weight_bytes += shape.num_elements() * static_cast<std::int64_t>(sizeof(float));
    if (!ctx.budget->allocate) return nullptr;
  }
  auto v = std::make_shared<Variable>(variable_name(short_name), init(), locking_, trainable);
  variables_.push_back(v);
  return v;
}

std::vector<std::string> layer_type_names() {
  std::vector<std::string> out;
  for (const auto& e : kLayers) out.emplace_back(e.type);
  return out;
}

std::string layer_name_stem(const std::string& type) {
  std::string out;
  for (std::size_t i = 0; i < type.size(); ++i) {
    char c = type[i];
    bool upper = std::isupper(static_cast<unsigned char>(c)) != 0;
    if (upper && i > 0 && std::islower(static_cast<unsigned char>(type[i - 1]))) out += '_';
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

void LayerNamer::reserve(const nlohmann::json& l) {
  if (!l.is_object()) return;
  if (l.contains("name") && l["name"].is_string()) given_.insert(l["name"].get<std::string>());
  if (l.contains("layer")) reserve(l["layer"]);  // a wrapper's layer takes its name from the same scope
}

std::string LayerNamer::next(const nlohmann::json& l) {
  if (!l.is_object() || !l.contains("type") || !l["type"].is_string()) return {};
  // A layer the spec names takes no count, as Keras counts only the layers it names itself.
  if (l.contains("name") && l["name"].is_string()) return l["name"].get<std::string>();
  const std::string stem = layer_name_stem(l["type"].get<std::string>());
  int& n = counts_[stem];
  std::string name;
  do {
    name = n == 0 ? stem : stem + "_" + std::to_string(n);
    ++n;
  } while (given_.contains(name));
  return name;
}

std::unique_ptr<Layer> make_layer(SpecReader& spec, const std::string& auto_name, LayerNamer* namer) {
  std::string type = spec.string("type");
  const LayerEntry* entry = nullptr;
  for (const auto& e : kLayers)
    if (type == e.type) entry = &e;
  if (entry == nullptr) {
    std::string known;
    for (const auto& e : kLayers) known += (known.empty() ? "" : ", ") + std::string(e.type);
    spec.fail("type", "unknown layer type \"" + type + "\" (known: " + known + ")");
  }
  std::string name = spec.string("name", auto_name);
  if (name.empty() || name.find('/') != std::string::npos || has_control_character(name))
    spec.fail("name", "a layer name must be non-empty and contain no '/' and no control character, got " +
                          quote_for_message(name));
  // Absent means the config's device; given, even empty, it must name one.
  std::string device;
  if (spec.has("device")) {
    device = spec.string("device");
    if (const std::string error = device_name_error(device); !error.empty()) spec.fail("device", error);
  } else {
    spec.skip("device");  // so an unknown key's message lists it among the known
  }
  const bool ignore_mask = spec.boolean("ignore_mask", false);
  LayerArgs args{spec, name, device, namer};
  auto layer = entry->factory(args);
  layer->ignore_mask_ = ignore_mask;
  spec.finish();
  return layer;
}

}  // namespace tctl
