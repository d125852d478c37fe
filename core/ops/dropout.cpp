// Dropout for training graphs: zeroes each element with probability `rate` and scales the rest by
// 1 / (1 - rate). The mask comes from a counter-based stream keyed by (seed, stream, step), so the gradient
// op, DropoutGrad (attributes rate, stream), replays the same mask and no thread count changes it.
#include "core/ops/dropout.h"

#include "core/autodiff.h"
#include "core/ops/ops.h"

namespace tctl {

void define_dropout_ops() {
  register_op({.name = "Dropout", .infer = same_as_input(0), .grad = [](GradBuilder& g) {
                 return std::vector<Output>{
                     g.op("DropoutGrad", {g.dy()},
                          Attrs{{"rate", g.attrs().f("rate")}, {"stream", dropout_stream(g.graph().node(g.y()))}})};
               }});
  register_op({.name = "DropoutGrad", .infer = same_as_input(0)});
}

}  // namespace tctl
