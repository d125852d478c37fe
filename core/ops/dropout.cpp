// Dropout for training graphs: zeroes each element with probability `rate` and scales the rest by
// 1 / (1 - rate). The mask comes from a counter-based stream keyed by (seed, stream, step), so the gradient
// op, DropoutGrad (attributes rate, stream), replays the same mask and no thread count changes it. With
// attribute per_sequence (core/ops/dropout.h) the mask is one per example and feature, the same at every step.
#include "core/ops/dropout.h"

#include "core/autodiff.h"
#include "core/ops/ops.h"

namespace tctl {

namespace {

TensorSpec dropout_infer(const InferContext& c) {
  if (dropout_per_sequence(c.attrs()) && c.shape(0).rank() < 3)
    c.fail("a mask per sequence needs an input [batch, steps, ...], got " + c.shape(0).to_string());
  return c.input(0);
}

}  // namespace

void define_dropout_ops() {
  register_op({.name = "Dropout", .infer = dropout_infer, .grad = [](GradBuilder& g) {
                 Attrs attrs{{"rate", g.attrs().f("rate")}, {"stream", dropout_stream(g.graph().node(g.y()))}};
                 if (dropout_per_sequence(g.attrs())) attrs.set("per_sequence", std::int64_t{1});
                 return std::vector<Output>{g.op("DropoutGrad", {g.dy()}, std::move(attrs))};
               }});
  register_op({.name = "DropoutGrad", .infer = dropout_infer});
}

}  // namespace tctl
