#include "models/nn/sequential.h"

#include <map>
#include <set>

#include "core/errors.h"

namespace tctl {

namespace {

// Keras' masking, checked while the model is built: a layer that would compute on padding steps is refused,
// unless its spec asks for that with ignore_mask (which Keras 3 does with a warning).
void check_mask(const Layer& layer, const std::string& mask_from, const SpecReader& where) {
  if (mask_from.empty() || layer.mask_use() != MaskUse::kRefuses || layer.ignores_mask()) return;
  where.fail_here(layer.type() + " does not support masking, and the padding mask of embedding \"" + mask_from +
                  "\" (mask_zero) reaches it; a recurrent layer or a global pooling between them uses it up, or "
                  "\"ignore_mask\": true computes on the padding and ends the mask there, as Keras 3 does");
}

}  // namespace

Sequential Sequential::from_json(const nlohmann::json& spec, const std::string& file, const std::string& path,
                                 std::uint64_t seed, LockingMode locking) {
  // The counting pass finds a model too large for memory before any of its weights exist.
  check(spec, file, path);
  MemoryBudget budget{memory_limit_bytes()};
  budget.allocate = true;
  return build_layers(spec, file, path, seed, locking, budget);
}

Sequential::Size Sequential::check(const nlohmann::json& spec, const std::string& file, const std::string& path) {
  MemoryBudget budget{memory_limit_bytes()};
  const Sequential counted = build_layers(spec, file, path, 0, LockingMode::kMutex, budget);
  return Size{budget.weight_bytes / static_cast<std::int64_t>(sizeof(float)), counted.activation_bytes_per_example()};
}

Sequential Sequential::build_layers(const nlohmann::json& spec, const std::string& file, const std::string& path,
                                    std::uint64_t seed, LockingMode locking, MemoryBudget& budget) {
  Sequential m;
  m.file_ = file;
  m.path_ = path;
  SpecReader top(spec, file, path);
  m.name_ = top.string("name", "sequential");
  // Printed in tables and messages, and written into run records: a NUL cut them short, an escape reached the
  // terminal.
  if (has_control_character(m.name_))
    top.fail("name", "a model name must contain no control character, got " + quote_for_message(m.name_));
  auto dims = top.positive_int_list("input_shape");
  if (dims.size() > static_cast<std::size_t>(Shape::kMaxRank - 1))
    top.fail("input_shape", "at most " + std::to_string(Shape::kMaxRank - 1) + " dimensions are supported");
  m.input_shape_ = Shape(std::span<const std::int64_t>(dims));
  if (!bounded_num_elements(m.input_shape_))
    top.fail("input_shape", m.input_shape_.to_string() + " has " + approximate_num_elements(m.input_shape_) +
                                " elements per example, more than the 2^36 tensorctl supports");
  const auto& layers = top.raw("layers");
  if (!layers.is_array() || layers.empty())
    top.fail("layers", "expected a non-empty list of layers, " + describe_json(layers));
  top.finish({"name", "input_shape", "layers"});
  LayerNamer namer;
  for (const auto& l : layers) namer.reserve(l);
  std::set<std::string> names;
  std::int64_t first_over_budget = -1;
  Shape shape = m.input_shape_;
  std::string mask_from;  // the layer whose mask reaches the next layer, or ""
  for (std::size_t i = 0; i < layers.size(); ++i) {
    SpecReader reader(layers[i], file, top.path_of("layers") + "[" + std::to_string(i) + "]");
    auto layer = make_layer(reader, namer.next(layers[i]), &namer);
    if (!names.insert(layer->name()).second) reader.fail("name", "duplicate layer name \"" + layer->name() + "\"");
    layer->set_locking_mode(locking);
    check_mask(*layer, mask_from, reader);
    if (layer->ignores_mask()) mask_from.clear();
    m.masked_input_.push_back(!mask_from.empty());
    shape = layer->build(shape, BuildContext{seed, static_cast<int>(i), &budget}, reader);
    if (!bounded_num_elements(shape))
      reader.fail_here("the output " + Shape::concat(-1, shape).keras_string() + " has " +
                       approximate_num_elements(shape) +
                       " elements per example, more than the 2^36 tensorctl supports");
    if (budget.exceeded() && first_over_budget < 0) first_over_budget = static_cast<std::int64_t>(i);
    m.output_shapes_.push_back(shape);
    if (layer->makes_mask()) mask_from = layer->name();
    if (layer->mask_use() == MaskUse::kConsumes) mask_from.clear();
    m.layers_.push_back(std::move(layer));
  }
  if (budget.exceeded())
    throw SpecError(
        file, top.path_of("layers") + "[" + std::to_string(first_over_budget) + "]",
        "the model's weights need " + byte_size_text(static_cast<double>(budget.weight_bytes)) +
            ", more than the memory limit of " + byte_size_text(static_cast<double>(budget.limit_bytes)) +
            " (this machine's memory or address-space limit, or TENSORCTL_MEMORY_LIMIT); this layer passes it");
  return m;
}

Output Sequential::call(Graph& g, Output x, bool training, const std::string& default_device) const {
  Output mask;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    Layer& layer = *layers_[i];
    Graph::Scope scope(g, layer.name(), layer.device().empty() ? default_device : layer.device(), g.current_phase());
    try {
      const MaskUse use = layer.mask_use();
      const bool masked = masked_input_[i] && (use == MaskUse::kConsumes || use == MaskUse::kUsesAndPasses);
      if (layer.makes_mask()) mask = g.add("TokenMask", {x});
      x = masked ? layer.call_masked(g, x, mask, training) : layer.call(g, x, training);
    } catch (const ShapeError& e) {
      throw SpecError(file_, (path_.empty() ? "" : path_ + ".") + "layers[" + std::to_string(i) + "]", e.what());
    }
  }
  return x;
}

// The layers in order, with the padding mask of an Embedding's mask_zero computed as TokenMask computes it
// (1 where the id is not 0) and handed to the layers that use it, as call() does.
std::string Sequential::to_onnx(OnnxWriter& w, const std::string& x) const {
  std::string y = x, mask;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const Layer& layer = *layers_[i];
    const MaskUse use = layer.mask_use();
    const bool masked = masked_input_[i] && (use == MaskUse::kConsumes || use == MaskUse::kUsesAndPasses);
    if (layer.makes_mask()) {
      const std::string zero = w.initializer(layer.name() + "/padding_id", {}, {0.0f});
      const std::string kept = w.op("Not", layer.name(), {w.op("Equal", layer.name(), {y, zero})});
      mask = w.op("Cast", layer.name(), {kept}, {OnnxAttr::integer("to", 1)});  // TensorProto FLOAT
    }
    y = masked ? layer.to_onnx_masked(w, y, mask) : layer.to_onnx(w, y);
  }
  return y;
}

std::vector<std::shared_ptr<Variable>> Sequential::variables() const {
  std::vector<std::shared_ptr<Variable>> out;
  for (const auto& l : layers_)
    for (const auto& v : l->variables()) out.push_back(v);
  return out;
}

std::ptrdiff_t Sequential::id_layer() const {
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i]->token_ids() > 0) return static_cast<std::ptrdiff_t>(i);
    if (!layers_[i]->keeps_values()) break;
  }
  return -1;
}

std::int64_t Sequential::input_token_ids() const {
  const std::ptrdiff_t at = id_layer();
  return at >= 0 ? layers_[static_cast<std::size_t>(at)]->token_ids() : 0;
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

std::int64_t Sequential::activation_bytes_per_example() const {
  // Each output is at most kMaxTensorElements and a stack has far fewer than 2^25 layers, sub-layers
  // included: no overflow.
  std::int64_t n = 0;
  for (std::size_t i = 0; i < layers_.size(); ++i)
    n += output_shapes_[i].num_elements() + layers_[i]->inner_activation_elements();
  return n * static_cast<std::int64_t>(sizeof(float));
}

void check_training_memory(const Sequential::Size& size, std::int64_t batch_size, int optimizer_slots,
                           const std::string& file, const std::string& where) {
  // In floating point: a batch size from the user times a large model may pass 2^63.
  const double weights = 4.0 * static_cast<double>(size.params) * (2.0 + optimizer_slots);
  const double activations =
      2.0 * static_cast<double>(size.activation_bytes_per_example) * static_cast<double>(batch_size);
  const double limit = static_cast<double>(memory_limit_bytes());
  if (weights + activations <= limit) return;
  throw SpecError(file, where,
                  "training needs about " + byte_size_text(weights + activations) + " (" + byte_size_text(weights) +
                      " for weights, gradients and optimizer slots, " + byte_size_text(activations) +
                      " for a batch of " + std::to_string(batch_size) + "), more than the memory limit of " +
                      byte_size_text(limit) +
                      " (this machine's memory or address-space limit, or TENSORCTL_MEMORY_LIMIT)");
}

}  // namespace tctl
