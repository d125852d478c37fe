// What the Dropout op's definition and its kernels share: which random stream a Dropout node draws its
// mask from, so that its gradient op (DropoutGrad, attribute "stream") replays the same mask.
#pragma once

#include <cstdint>

#include "core/graph.h"

namespace tctl {

// The "stream" attribute of a Dropout node (the Dropout layer derives one from its place in the model), or
// else the node's id.
inline std::int64_t dropout_stream(const Node& forward) { return forward.attrs.i_or("stream", forward.id); }

}  // namespace tctl
