// Parallel: runs two or more branches (each a list of layers) on the same input and merges their outputs,
// by concatenating the feature axis ("concat", rank-1 outputs) or by adding them ("add", equal shapes).
//
//   {"type": "Parallel", "branches": [[{"type": "Dense", "units": 4}], [{"type": "Delay", "ms": 20}]],
//    "merge": "concat"}
//
// Sub-layers are parsed with make_layer at the paths "<layer>.branches[i][j]", and named like a Sequential's
// layers (automatic names "dense", "dense_1", ... unique within the whole Parallel, stepping around given
// names). Their variables are named "<parallel>/<sub-layer>/<variable>" and listed by variables() in branch
// order, so checkpoints save them. The branches have no data dependency on each other, so the executor can
// run them concurrently. Their nodes carry the Parallel layer's name as their layer (what the profiler's
// per-layer table and check_layer expect), with node names made unique by the graph.
#include <map>
#include <optional>
#include <set>

#include "core/errors.h"
#include "core/kernel_context.h"
#include "models/nn/layer.h"

namespace tctl {
namespace {

class Parallel final : public Layer {
 public:
  explicit Parallel(LayerArgs& args) : Layer("Parallel", args.name, args.device), file_(args.spec.file()) {
    // Read in place, never copied: a copy per level made nested Parallel layers quadratic in their size.
    const nlohmann::json& spec = args.spec.raw("branches");
    branches_path_ = args.spec.path_of("branches");
    if (!spec.is_array() || spec.size() < 2)
      args.spec.fail("branches",
                     "expected a list of at least 2 branches (each a list of layers), " + describe_json(spec));
    merge_ = args.spec.one_of("merge", {"add", "concat"}, "concat");
    // One name scope across all branches, so sub-layer (and variable) names are unique in the Parallel.
    LayerNamer namer;
    for (std::size_t i = 0; i < spec.size(); ++i) {
      if (!spec[i].is_array() || spec[i].empty())
        throw SpecError(file_, branch_path(i), "expected a non-empty list of layers, " + describe_json(spec[i]));
      for (const auto& l : spec[i]) namer.reserve(l);
    }
    std::set<std::string> names;
    branches_.resize(spec.size());
    for (std::size_t i = 0; i < spec.size(); ++i) {
      for (std::size_t j = 0; j < spec[i].size(); ++j) {
        const nlohmann::json& l = spec[i][j];
        SpecReader reader(l, file_, layer_path(i, j));
        auto layer = make_layer(reader, namer.next(l), &namer);
        if (!names.insert(layer->name()).second)
          reader.fail("name", "duplicate layer name \"" + layer->name() + "\" in Parallel layer \"" + name() + "\"");
        branches_[i].push_back(std::move(layer));
      }
    }
  }

  Shape build(const Shape& input, const BuildContext& ctx, const SpecReader& where) override {
    // Sub-layers draw from a stream of their own, keyed by this layer's index and their position.
    const std::uint64_t base = ctx.key(0x50617261ull);
    // A sub-layer's build reads nothing from its spec, only its file and path for messages.
    static const nlohmann::json kNoKeys = nlohmann::json::object();
    int index = 0;
    inner_elements_ = 0;
    std::vector<Shape> outputs;
    for (std::size_t i = 0; i < branches_.size(); ++i) {
      Shape shape = input;
      for (std::size_t j = 0; j < branches_[i].size(); ++j) {
        Layer& layer = *branches_[i][j];
        layer.set_variable_prefix(variable_prefix() + name() + "/");
        layer.set_locking_mode(locking_mode());
        SpecReader reader(kNoKeys, file_, layer_path(i, j));
        shape = layer.build(shape, BuildContext{base, index++, ctx.budget}, reader);
        // Sequential checks only the Parallel's own output; a sub-layer's may be larger than it.
        const std::optional<std::int64_t> elements = bounded_num_elements(shape);
        if (!elements)
          reader.fail_here("the output " + Shape::concat(-1, shape).keras_string() + " has " +
                           approximate_num_elements(shape) +
                           " elements per example, more than the 2^36 tensorctl supports");
        inner_elements_ += *elements + layer.inner_activation_elements();
        adopt_variables(layer);
      }
      outputs.push_back(shape);
    }
    auto keras = [](const Shape& s) { return Shape::concat(-1, s).keras_string(); };
    if (merge_ == "add") {
      for (std::size_t i = 1; i < outputs.size(); ++i)
        if (outputs[i] != outputs[0])
          where.fail_here("Parallel layer \"" + name() +
                          "\" merges by \"add\", which needs equal branch outputs, but branch 0 gives " +
                          keras(outputs[0]) + " and branch " + std::to_string(i) + " gives " + keras(outputs[i]));
      return outputs[0];
    }
    std::int64_t features = 0;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].rank() != 1)
        where.fail_here("Parallel layer \"" + name() +
                        "\" merges by \"concat\", which needs flat branch outputs (None, features), but branch " +
                        std::to_string(i) + " gives " + keras(outputs[i]) +
                        (i == 0 ? "" : " (branch 0 gives " + keras(outputs[0]) + ")"));
      if (__builtin_add_overflow(features, outputs[i][0], &features) || features > kMaxTensorElements)
        where.fail_here("Parallel layer \"" + name() +
                        "\" concatenates more than the 2^36 features per example tensorctl supports");
    }
    return Shape{features};
  }

  Output call(Graph& g, Output x, bool training) override {
    std::vector<Output> ys;
    for (const auto& branch : branches_) {
      Output y = x;
      for (const auto& layer : branch) {
        if (layer->device().empty()) {
          y = layer->call(g, y, training);
        } else {
          Graph::Scope scope(g, g.current_layer(), layer->device(), g.current_phase());
          y = layer->call(g, y, training);
        }
      }
      ys.push_back(y);
    }
    if (merge_ == "add") return ys.size() == 2 ? g.add("Add", ys) : g.add("AddN", ys);
    return g.add("Concat", ys);
  }

  // Every branch holds its layers' outputs until the merge, and their gradients in the backward pass: 16
  // branches of one Activation hold 16 tensors the size of the input, not one.
  std::int64_t inner_activation_elements() const override { return inner_elements_; }

  // The branches one after another on the same input, joined by Sum or by Concat on the last axis.
  std::string to_onnx(OnnxWriter& w, const std::string& x) const override {
    std::vector<std::string> ys;
    for (const auto& branch : branches_) {
      std::string y = x;
      for (const auto& layer : branch) y = layer->to_onnx(w, y);
      ys.push_back(y);
    }
    if (merge_ == "add") return w.op("Sum", name(), ys);
    return w.op("Concat", name(), ys, {OnnxAttr::integer("axis", -1)});
  }

  nlohmann::json config() const override {
    nlohmann::json branches = nlohmann::json::array();
    for (const auto& branch : branches_) {
      nlohmann::json layers = nlohmann::json::array();
      for (const auto& layer : branch) layers.push_back(layer->to_json());
      branches.push_back(layers);
    }
    return {{"branches", branches}, {"merge", merge_}};
  }

 private:
  std::string branch_path(std::size_t i) const { return branches_path_ + "[" + std::to_string(i) + "]"; }
  std::string layer_path(std::size_t i, std::size_t j) const { return branch_path(i) + "[" + std::to_string(j) + "]"; }

  std::string file_;
  std::string branches_path_;
  std::string merge_;
  std::vector<std::vector<std::unique_ptr<Layer>>> branches_;
  std::int64_t inner_elements_ = 0;
};

}  // namespace

std::unique_ptr<Layer> make_parallel(LayerArgs& args) { return std::make_unique<Parallel>(args); }

}  // namespace tctl
