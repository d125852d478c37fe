// Reshape: (None, ...) -> (None, *target_shape) with the same elements in the same order. One entry of
// target_shape may be -1, inferred from the element count, as in Keras.
#include <algorithm>

#include "core/errors.h"
#include "models/nn/layer.h"

namespace tctl {
namespace {

class Reshape final : public Layer {
 public:
  explicit Reshape(LayerArgs& args) : Layer("Reshape", args.name, args.device) {
    const nlohmann::json& v = args.spec.raw("target_shape");
    if (!v.is_array() || v.empty() || v.size() + 1 > static_cast<std::size_t>(Shape::kMaxRank))
      args.spec.fail("target_shape", "expected a list of 1 to " + std::to_string(Shape::kMaxRank - 1) +
                                         " positive integers (one may be -1), " + describe_json(v));
    int unknown = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const bool ok = fits_int64(v[i]) && (v[i].get<std::int64_t>() > 0 || v[i].get<std::int64_t>() == -1);
      if (!ok || (v[i].get<std::int64_t>() == -1 && ++unknown > 1))
        throw SpecError(args.spec.file(), args.spec.path_of("target_shape") + "[" + std::to_string(i) + "]",
                        std::string(ok ? "only one entry may be -1" : "expected a positive integer or -1") + ", " +
                            describe_json(v[i]));
      target_.push_back(v[i].get<std::int64_t>());
    }
  }

  Shape build(const Shape& input, const BuildContext&, const SpecReader& where) override {
    const std::int64_t total = input.num_elements();
    std::int64_t known = 1;
    for (std::int64_t d : target_)
      if (d != -1 && (__builtin_mul_overflow(known, d, &known) || known > kMaxTensorElements))
        where.fail("target_shape",
                   nlohmann::json(target_).dump() + " has more than the 2^36 elements per example tensorctl supports");
    resolved_ = target_;
    for (auto& d : resolved_)
      if (d == -1 && known > 0 && total % known == 0) d = total / known;
    const Shape out{std::span<const std::int64_t>(resolved_)};
    if (out.num_elements() != total || std::find(resolved_.begin(), resolved_.end(), -1) != resolved_.end())
      where.fail("target_shape", "cannot reshape " + Shape::concat(-1, input).keras_string() + " (" +
                                     std::to_string(total) + " elements per example) to " +
                                     nlohmann::json(target_).dump());
    return out;
  }

  Output call(Graph& g, Output x, bool) override { return g.add("Reshape", {x}, Attrs{{"shape", resolved_}}); }
  bool keeps_values() const override { return true; }
  // The batch dimension is kept (0 copies the input's).
  std::string to_onnx(OnnxWriter& w, const std::string& x) const override {
    std::vector<std::int64_t> shape{0};
    shape.insert(shape.end(), target_.begin(), target_.end());
    return w.op("Reshape", name(), {x, w.int_initializer(name() + "/shape", shape)});
  }
  nlohmann::json config() const override { return {{"target_shape", target_}}; }

 private:
  std::vector<std::int64_t> target_;    // as written, with at most one -1
  std::vector<std::int64_t> resolved_;  // with the -1 filled in by build()
};

}  // namespace

std::unique_ptr<Layer> make_reshape(LayerArgs& args) { return std::make_unique<Reshape>(args); }

void keras_reshape(KerasConfig& c, nlohmann::json& out, KerasLayerWalk& walk) {
  const nlohmann::json* raw = c.take("target_shape");
  if (!raw) c.fail("target_shape", "missing required option target_shape");
  const nlohmann::json& v = keras_list(*raw);
  bool ok = v.is_array() && !v.empty();
  int unknown = 0;
  for (std::size_t i = 0; ok && i < v.size(); ++i) {
    ok = v[i].is_number_integer() && (v[i].get<std::int64_t>() > 0 || v[i].get<std::int64_t>() == -1);
    if (ok && v[i].get<std::int64_t>() == -1) ++unknown;
  }
  if (!ok || unknown > 1)
    c.fail("target_shape", "expected a list of positive integers with at most one -1, " + describe_json(*raw));
  out["target_shape"] = v;
  walk.rank = v.size();
}

}  // namespace tctl
