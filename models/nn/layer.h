// Layer: one entry of a Sequential stack. A layer parses its own JSON keys, creates and owns its Variables
// when built, adds its ops to a graph when called, and exports itself to ONNX (to_onnx). New layers are one
// file in models/nn/layers/ plus one line in models/nn/layers/layers.def, which also names the layer's Keras
// mapping when it has one (TCTL_KERAS_LAYER).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/function_ref.h"
#include "core/graph.h"
#include "core/variable.h"
#include "models/io/keras_config.h"
#include "models/io/onnx_writer.h"
#include "models/io/spec_reader.h"
#include "models/nn/memory_budget.h"

namespace tctl {

class LayerNamer;

// Keras masking (an Embedding's mask_zero): what a layer does with the mask of its input's padding steps when
// there is one. kRefuses: the model is refused at build (the layer would compute on the padding); kPasses: it
// passes the mask on untouched (Dropout); kConsumes: it uses the mask and its output has none (a recurrent
// layer giving its last output, a global pooling); kUsesAndPasses: it uses it and its output keeps the steps
// (a recurrent layer giving every step's).
enum class MaskUse { kRefuses, kPasses, kConsumes, kUsesAndPasses };

// What building a layer needs besides its input shape: the seed its initializers draw from.
struct BuildContext {
  std::uint64_t seed = 0;
  int layer_index = 0;
  // Charged for every variable before it is allocated; nullptr: no limit (tests building single layers).
  MemoryBudget* budget = nullptr;
  // The 64-bit key of this layer's random draws (initializers, dropout masks), from the seed and the
  // layer's place; `salt` separates a layer's different uses.
  std::uint64_t key(std::uint64_t salt = 0) const;
};

class Layer {
 public:
  virtual ~Layer() = default;

  const std::string& name() const { return name_; }
  const std::string& type() const { return type_; }
  // The requested device, or "" for the model's default.
  const std::string& device() const { return device_; }

  // Creates the variables for an input of this shape (batch dimension excluded) and returns the output
  // shape, also without the batch. Throws SpecError at `where` when the input does not fit.
  virtual Shape build(const Shape& input, const BuildContext& ctx, const SpecReader& where) = 0;
  // Adds this layer's ops for input x; `training` switches dropout and similar behaviour.
  virtual Output call(Graph& g, Output x, bool training) = 0;
  // The layer's resolved keys (type-specific), merged into the spec written to model.json.
  virtual nlohmann::json config() const = 0;
  // Adds the layer's inference form to an ONNX graph on the value `x` (a batch of this layer's inputs) with
  // the current values of its variables, and returns the name of its output value; valid after build(). The
  // default refuses: SpecError("model.json", name(), "ONNX export has no form for layer type ...").
  virtual std::string to_onnx(OnnxWriter& w, const std::string& x) const;

  // Where Keras 3 keeps each of variables(), in order, inside the layer's group of a .keras file's
  // model.weights.h5 ("vars/0", "cell/vars/1", ...; keras/src/saving/saving_lib.py names the groups by
  // attribute), and whether the stored array may have another shape of the same elements in the same order
  // (KerasHub's attention kernels are [hidden, heads, head width] where ours are [hidden, hidden]). The
  // default, "vars/i" with the shape kept, is every layer whose variables are Keras' own in Keras' order.
  struct KerasWeight {
    std::string path;
    bool any_shape = false;
  };
  virtual std::vector<KerasWeight> keras_weights() const;

  // Variables in a fixed order (kernel before bias); checkpoints name them "<layer>/<variable>".
  const std::vector<std::shared_ptr<Variable>>& variables() const { return variables_; }
  std::int64_t param_count() const;
  // The full resolved spec entry: type, name, device (when set) and config().
  nlohmann::json to_json() const;
  // Elements per example of the activations a training step holds inside the layer besides its output: the
  // outputs of a container's sub-layers (every layer of a Parallel's branches). 0 for a plain layer; valid
  // after build().
  virtual std::int64_t inner_activation_elements() const { return 0; }
  // For a layer whose inputs are token ids (an embedding): how many ids it knows, so a valid input is a whole
  // number in [0, token_ids()). 0 for a layer of numeric inputs. Data preparation and predict check the rows
  // of a model whose inputs reach such a layer unchanged (Sequential::id_layer) against it.
  virtual std::int64_t token_ids() const { return 0; }
  // Whether the layer's output holds its input's values unchanged, only in another shape (Reshape, Flatten):
  // token ids pass through it as ids.
  virtual bool keeps_values() const { return false; }
  // Whether the layer's output carries a mask of its input's padding ids (an Embedding with mask_zero): the
  // Sequential computes it (TokenMask) and hands it to the layers after.
  virtual bool makes_mask() const { return false; }
  virtual MaskUse mask_use() const { return MaskUse::kRefuses; }
  // The spec's "ignore_mask", a key of every layer: the layer takes no mask, computing on every step,
  // padding included, and the mask ends there. Keras 3 does this, with a warning, where a mask reaches a
  // layer that does not support masking; import-keras sets it there.
  bool ignores_mask() const { return ignore_mask_; }
  // call() for an input with a mask [batch, steps], 1 a step and 0 padding; a layer whose mask_use() is
  // kConsumes or kUsesAndPasses overrides it.
  virtual Output call_masked(Graph& g, Output x, Output mask, bool training) {
    (void)mask;
    return call(g, x, training);
  }
  // to_onnx() for an input with a mask: `mask` names a float [batch, steps] value, 1 a step and 0 padding.
  // A layer whose mask_use() is kConsumes or kUsesAndPasses overrides it; the default refuses (SpecError).
  virtual std::string to_onnx_masked(OnnxWriter& w, const std::string& x, const std::string& mask) const;

  // The locking mode of the variables build() creates (the optimizer's `locking`); set before build().
  void set_locking_mode(LockingMode mode) { locking_ = mode; }
  // Prepended to the names of the variables build() creates, "<prefix><layer>/<variable>"; set before
  // build(). A container layer gives its sub-layers its own name ("parallel/"), so names stay unique.
  void set_variable_prefix(std::string prefix) { variable_prefix_ = std::move(prefix); }
  const std::string& variable_prefix() const { return variable_prefix_; }

 protected:
  Layer(std::string type, std::string name, std::string device)
      : type_(std::move(type)), name_(std::move(name)), device_(std::move(device)) {}
  // Charges `shape` (float32, at most kMaxTensorElements) to the context's budget, then creates the variable
  // from `init()`; in the budget's counting pass it allocates nothing and returns nullptr.
  std::shared_ptr<Variable> add_variable(const BuildContext& ctx, const std::string& short_name, const Shape& shape,
                                         FunctionRef<Tensor()> init, bool trainable = true);
  // Reads the layer's variables into g (ReadVariable nodes).
  Output read(Graph& g, std::size_t i) const { return g.read(variables_[i]); }
  // The current value of the variable build() named `short_name` ("kernel"); it must exist.
  Tensor value(const std::string& short_name) const;
  // The name build() gave that variable, "<prefix><layer>/<short_name>", whether or not it exists.
  std::string variable_name(const std::string& short_name) const { return variable_prefix_ + name_ + "/" + short_name; }
  LockingMode locking_mode() const { return locking_; }
  // A container layer lists the variables of a sub-layer it owns as its own (after its build()).
  void adopt_variables(const Layer& child) {
    for (const auto& v : child.variables()) variables_.push_back(v);
  }

  friend std::unique_ptr<Layer> make_layer(SpecReader& spec, const std::string& auto_name, LayerNamer* namer);

 private:
  std::string type_;
  std::string name_;
  std::string device_;
  bool ignore_mask_ = false;  // set by make_layer, which reads the key every layer shares
  LockingMode locking_ = LockingMode::kMutex;
  std::string variable_prefix_;
  std::vector<std::shared_ptr<Variable>> variables_;
};

// Everything a layer factory needs: the reader positioned on the layer's object, and the resolved name.
struct LayerArgs {
  SpecReader& spec;
  std::string name;
  std::string device;
  // The scope's automatic names, for a wrapper to name the layer it wraps as Keras does (null: a scope of its
  // own).
  LayerNamer* namer = nullptr;
};
using LayerFactory = std::unique_ptr<Layer> (*)(LayerArgs& args);
// The Keras mappings of the layers that have one, by Keras class name (the layer's type), for keras_to_spec.
const KerasLayerMappings& keras_layer_mappings();

// Builds the layer described by `spec` (a "type" key and the type's own keys); an unknown type is an error
// listing the known ones. `auto_name` is used when the spec has no "name"; `namer`, the scope's, names the layer
// a wrapper (Bidirectional) holds.
std::unique_ptr<Layer> make_layer(SpecReader& spec, const std::string& auto_name, LayerNamer* namer = nullptr);
std::vector<std::string> layer_type_names();
// "Dense" -> "dense", "MaxPooling2D" -> "max_pooling2d": the Keras stem of automatic names.
std::string layer_name_stem(const std::string& type);

// Keras-style automatic layer names (dense, dense_1, ...) for one scope of names (a model, a Parallel). As in
// Keras, only the layers the spec leaves unnamed are counted: [Dense "hidden", Dense] names the second dense.
// An automatic name steps around the names the spec gives, so a layer the user did not name is never
// reported as a duplicate of one they did. Call reserve() for every layer spec of the scope before next().
class LayerNamer {
 public:
  void reserve(const nlohmann::json& layer_spec);
  // The automatic name for this layer spec's type, or "" when it has no string "type" (make_layer reports that);
  // the spec's own name, uncounted, where it gives one.
  std::string next(const nlohmann::json& layer_spec);

 private:
  std::set<std::string> given_;
  std::map<std::string, int> counts_;
};

}  // namespace tctl
