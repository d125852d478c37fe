// GRU over a sequence [batch, steps, features]: the layer is detail::RecurrentLayer
// (models/nn/layers/detail/recurrent.h), its cell the Recurrence op's "gru" (core/ops/recurrent.h).
#include "models/nn/layers/detail/recurrent.h"

namespace tctl {

std::unique_ptr<Layer> make_gru(LayerArgs& args) { return std::make_unique<detail::RecurrentLayer>("GRU", args, true); }

void keras_gru(KerasConfig& c, nlohmann::json& out, KerasLayerWalk& walk) {
  detail::keras_recurrent(c, out, walk, "GRU");
}

}  // namespace tctl
