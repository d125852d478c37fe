// Delay: the identity, after sleeping `ms` milliseconds in the forward pass (training and inference), so a
// blocking layer shows in a profile and the executor's inter-op concurrency can be seen. The backward pass
// does not sleep (see core/ops/delay.cpp).
#include "models/nn/layer.h"

namespace tctl {
namespace {

class Delay final : public Layer {
 public:
  // At most a minute: a longer delay is a typo (seconds written as milliseconds times 1000).
  static constexpr double kMaxMs = 60000.0;

  explicit Delay(LayerArgs& args) : Layer("Delay", args.name, args.device) {
    if (!args.spec.has("ms")) args.spec.fail_here("missing required key \"ms\"");
    ms_ = args.spec.number("ms", 0.0);
    if (ms_ < 0.0 || ms_ > kMaxMs)
      args.spec.fail("ms", "expected a number of milliseconds in [0, 60000], " + describe_json(args.spec.raw("ms")));
  }
  Shape build(const Shape& input, const BuildContext&, const SpecReader&) override { return input; }
  Output call(Graph& g, Output x, bool /*training*/) override { return g.add("Delay", {x}, Attrs{{"ms", ms_}}); }
  // The delay is a profiling aid, not part of what the model computes.
  std::string to_onnx(OnnxWriter& w, const std::string& x) const override { return w.op("Identity", name(), {x}); }
  nlohmann::json config() const override { return {{"ms", ms_}}; }

 private:
  double ms_ = 0.0;
};

}  // namespace

std::unique_ptr<Layer> make_delay(LayerArgs& args) { return std::make_unique<Delay>(args); }

}  // namespace tctl
