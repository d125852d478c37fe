// SimpleRNN over a sequence [batch, steps, features]: the layer is detail::RecurrentLayer
// (models/nn/layers/detail/recurrent.h), its cell the Recurrence op's "simple_tanh" or "simple_relu"
// (core/ops/recurrent.h).
#include "models/nn/layers/detail/recurrent.h"

namespace tctl {

std::unique_ptr<Layer> make_simple_rnn(LayerArgs& args) {
  return std::make_unique<detail::RecurrentLayer>("SimpleRNN", args, false);
}

void keras_simple_rnn(KerasConfig& c, nlohmann::json& out, KerasLayerWalk& walk) {
  detail::keras_recurrent(c, out, walk, "SimpleRNN");
}

}  // namespace tctl
