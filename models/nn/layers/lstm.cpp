// LSTM over a sequence [batch, steps, features]: the layer is detail::RecurrentLayer
// (models/nn/layers/detail/recurrent.h), its cell the Recurrence op's "lstm" (core/ops/recurrent.h).
#include "models/nn/layers/detail/recurrent.h"

namespace tctl {

std::unique_ptr<Layer> make_lstm(LayerArgs& args) {
  return std::make_unique<detail::RecurrentLayer>("LSTM", args, true);
}

void keras_lstm(KerasConfig& c, nlohmann::json& out, KerasLayerWalk& walk) {
  detail::keras_recurrent(c, out, walk, "LSTM");
}

}  // namespace tctl
