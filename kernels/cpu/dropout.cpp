// Dropout for training graphs: zeroes each element with probability `rate` and scales the rest by
// 1 / (1 - rate). The mask comes from a counter-based stream keyed by (seed, stream, step), so the gradient
// op replays the same mask and no thread count changes it. The stream is the "stream" attribute (the
// Dropout layer derives one from its place in the model), or else the forward node's id.
#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {
namespace {

void apply_mask(KernelContext& ctx, std::int64_t stream) {
  const float rate = static_cast<float>(ctx.attrs().f("rate"));
  const float keep_scale = 1.0f / (1.0f - rate);
  const std::uint64_t key = ctx.random_key(stream);
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output().mutable_data<float>();
  for_each_element(ctx, ctx.output().num_elements(), [&](std::int64_t i) {
    y[i] = uniform_at(key, static_cast<std::uint64_t>(i)) < rate ? 0.0f : x[i] * keep_scale;
  });
}

std::int64_t stream_of(const Node& forward) { return forward.attrs.i_or("stream", forward.id); }

void dropout_cpu(KernelContext& ctx) { apply_mask(ctx, stream_of(ctx.node())); }
void dropout_grad_cpu(KernelContext& ctx) { apply_mask(ctx, ctx.attrs().i("stream")); }

}  // namespace

TCTL_REGISTER_OP({.name = "Dropout",
                  .infer = same_as_input(0),
                  .grad = [](GradBuilder& g) {
                    return std::vector<Output>{g.op("DropoutGrad", {g.dy()},
                                                    Attrs{{"rate", g.attrs().f("rate")},
                                                          {"stream", stream_of(g.graph().node(g.y()))}})};
                  },
                  .cpu = dropout_cpu});
TCTL_REGISTER_OP({.name = "DropoutGrad", .infer = same_as_input(0), .cpu = dropout_grad_cpu});

}  // namespace tctl::cpu
