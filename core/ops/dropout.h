// What the Dropout op's definition and its kernels share: which random stream a Dropout node draws its
// mask from, so that its gradient op (DropoutGrad, attribute "stream") replays the same mask.
#pragma once

#include <cstdint>

#include "core/graph.h"

namespace tctl {

// The "stream" attribute of a Dropout node (the Dropout layer derives one from its place in the model), or
// else the node's id.
inline std::int64_t dropout_stream(const Node& forward) { return forward.attrs.i_or("stream", forward.id); }

// Attribute "per_sequence": on an input [N, T, ...] the mask is drawn per example and feature and kept at
// every step t (Keras' dropout on a recurrent layer's inputs, a Dropout's noise_shape (None, 1, features)).
inline bool dropout_per_sequence(const Attrs& attrs) { return attrs.i_or("per_sequence", 0) != 0; }

// An input [N, T, ...] as N sequences of T rows of `width` elements (the rest of its dimensions).
struct SequenceRows {
  std::int64_t batch, steps, width;
};
inline SequenceRows sequence_rows(const Shape& s) {
  const std::int64_t batch = s[0], steps = s[1];
  const std::int64_t width = batch * steps > 0 ? s.num_elements() / (batch * steps) : 0;
  return {batch, steps, width};
}

}  // namespace tctl
