// Dropout: in training, zeroes a fraction `rate` of the inputs and scales the rest up; identity otherwise.
#include "models/layer.h"

namespace tctl {
namespace {

class Dropout final : public Layer {
 public:
  explicit Dropout(LayerArgs& args) : Layer("Dropout", args.name, args.device) {
    if (!args.spec.has("rate")) args.spec.fail_here("missing required key \"rate\"");
    rate_ = args.spec.number_in("rate", 0.0, 0.0, 1.0);
  }
  Shape build(const Shape& input, const BuildContext&, const SpecReader&) override { return input; }
  Output call(Graph& g, Output x, bool training) override {
    if (!training || rate_ == 0.0) return x;
    return g.add("Dropout", {x}, Attrs{{"rate", rate_}});
  }
  nlohmann::json config() const override { return {{"rate", rate_}}; }

 private:
  double rate_ = 0.0;
};

}  // namespace

std::unique_ptr<Layer> make_dropout(LayerArgs& args) { return std::make_unique<Dropout>(args); }

}  // namespace tctl
