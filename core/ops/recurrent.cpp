// The recurrent ops (see core/ops/recurrent.h for the cell and the workspace):
//   Recurrence             (xp [N, T, G H], U [H, G H], b[, mask]) -> workspace [P, N, T, H]; attributes
//                          cell and go_backwards. b is [G H], or for the GRU [2, 3 H]: the input bias, then
//                          the recurrent bias that the reset gate scales with h_{t-1} U_h. The optional mask
//                          [N, T] (1 a step, 0 padding, by input step) is Keras' masking: at a padding step
//                          the states carry over unchanged. Attributes recurrent_dropout (a rate, in
//                          training) and stream: h_{t-1} U becomes (h_{t-1} m) U, m [N, H] one mask per
//                          sequence (0, or 1 / (1 - rate)) drawn from the stream, as Keras' recurrent
//                          dropout; the gradient ops draw the same m.
//   RecurrenceOutput       (workspace[, mask]) -> the outputs h: [N, T, H] with return_sequences (reversed in
//                          time with reverse, as Bidirectional's backward layer needs), else the last
//                          [N, H]. With a mask, the outputs at padding steps are zeros (Keras'
//                          zero_output_for_mask), the last one too where the last step run read padding;
//                          go_backwards says which input step each output read.
//   RecurrenceOutputGrad   (dy, workspace[, mask]) -> the workspace's gradient [1, N, T, H]: plane 0 only,
//                          dy at the steps the outputs read, zeros elsewhere. The other planes would be
//                          zeros that nothing reads (an LSTM's five: 33 MB a step in bench_workloads
//                          lstm_text_b64), so they are not made.
//   RecurrenceGrad         (dworkspace, workspace, U[, mask]) -> d xp, back through time from that plane.
//   RecurrenceParamGrad    (d xp, workspace), attribute wrt: 0 the gradient of U, the sum over steps of
//                          h_{t-1}^T times the step's gradient, 1 the bias's.
#include "core/ops/recurrent.h"

#include <span>
#include <vector>

#include "core/autodiff.h"
#include "core/ops/ops.h"

namespace tctl {
namespace {

// What the gradient ops read of the forward node: its cell and direction, and its recurrent dropout.
Attrs cell_attrs(const Attrs& from) {
  Attrs a{{"cell", from.s("cell")}, {"go_backwards", from.i_or("go_backwards", 0)}};
  if (from.f_or("recurrent_dropout", 0.0) > 0.0) {
    a.set("recurrent_dropout", from.f("recurrent_dropout"));
    a.set("stream", from.i("stream"));
  }
  return a;
}

// An optional mask input `i` must be [N, T] of the sequence `x` [N, T, ...].
void check_mask(const InferContext& c, int i, const Shape& sequence) {
  if (c.num_inputs() <= i) return;
  c.expect_rank(i, 2);
  c.expect_dtype(i, DType::kF32);
  const Shape& m = c.shape(i);
  if ((m[0] >= 0 && sequence[0] >= 0 && m[0] != sequence[0]) || m[1] != sequence[1])
    c.fail("mask " + m.to_string() + " does not fit the sequence " + sequence.to_string());
}

TensorSpec recurrence_infer(const InferContext& c) {
  if (c.num_inputs() != 3 && c.num_inputs() != 4) c.fail("Recurrence takes 3 inputs and an optional mask");
  const RecurrentCell cell = recurrent_cell(c.attrs());
  c.expect_rank(0, 3);
  c.expect_rank(1, 2);
  for (int i = 0; i < 3; ++i) c.expect_dtype(i, DType::kF32);
  const Shape& xp = c.shape(0);
  const Shape& u = c.shape(1);
  const std::int64_t units = u[0], columns = recurrent_gates(cell) * units;
  if (units < 1 || u[1] != columns)
    c.fail("recurrent kernel " + u.to_string() + " is not [units, " + std::to_string(recurrent_gates(cell)) +
           " units]");
  if (xp[2] != columns)
    c.fail("input " + xp.to_string() + " does not have the kernel's " + std::to_string(columns) + " columns");
  if (!(c.shape(2) == recurrent_bias_shape(cell, columns)))
    c.fail("bias " + c.shape(2).to_string() + " is not " + recurrent_bias_shape(cell, columns).to_string());
  check_mask(c, 3, xp);
  const double rate = c.attrs().f_or("recurrent_dropout", 0.0);
  if (!(rate >= 0.0 && rate < 1.0)) c.fail("recurrent_dropout " + std::to_string(rate) + " is not in [0, 1)");
  return {DType::kF32, Shape{recurrent_planes(cell), xp[0], xp[1], units}};
}

std::vector<Output> recurrence_grad(GradBuilder& g) {
  const Attrs attrs = cell_attrs(g.attrs());
  std::vector<Output> inputs{g.dy(), g.y(), g.x(1)};
  if (g.num_inputs() == 4) inputs.push_back(g.x(3));
  const Output dxp = g.op("RecurrenceGrad", std::move(inputs), attrs);
  auto param = [&](std::int64_t wrt) {
    Attrs a = attrs;
    a.set("wrt", wrt);
    return g.op("RecurrenceParamGrad", {dxp, g.y()}, std::move(a));
  };
  std::vector<Output> grads{g.needs(0) ? dxp : Output{}, g.needs(1) ? param(0) : Output{},
                            g.needs(2) ? param(1) : Output{}};
  if (g.num_inputs() == 4) grads.emplace_back();  // the mask gets none
  return grads;
}

TensorSpec recurrence_grad_infer(const InferContext& c) {
  const Shape& ws = c.shape(1);
  const Shape& dws = c.shape(0);
  if (dws.rank() != 4 || dws[0] != 1 || dws[2] != ws[2] || dws[3] != ws[3])
    c.fail("workspace gradient " + dws.to_string() + " is not plane 0 of the workspace " + ws.to_string());
  return {DType::kF32, Shape{ws[1], ws[2], c.shape(2)[1]}};
}

TensorSpec param_grad_infer(const InferContext& c) {
  const RecurrentCell cell = recurrent_cell(c.attrs());
  const std::int64_t columns = c.shape(0)[2], units = c.shape(1)[3];
  return {DType::kF32, c.attrs().i("wrt") == 0 ? Shape{units, columns} : recurrent_bias_shape(cell, columns)};
}

TensorSpec output_infer(const InferContext& c) {
  if (c.num_inputs() != 1 && c.num_inputs() != 2) c.fail("RecurrenceOutput takes a workspace and an optional mask");
  c.expect_rank(0, 4);
  const Shape& ws = c.shape(0);
  check_mask(c, 1, Shape{ws[1], ws[2]});
  if (c.attrs().i("return_sequences") != 0) return {DType::kF32, Shape{ws[1], ws[2], ws[3]}};
  return {DType::kF32, Shape{ws[1], ws[3]}};
}

// Multiply-adds of h_{t-1} U over every step of every example: N T H (G H), the cell's product; the
// gates' elementwise work is not counted, as for the activations.
std::int64_t recurrent_product(const Shape& xp, std::int64_t units) { return cost_product(cost_elements(xp), units); }
std::int64_t recurrence_flops(std::span<const TensorSpec> in, const TensorSpec&, const Attrs&) {
  return cost_product(2, recurrent_product(in[0].shape, in[1].shape[0]));
}
std::int64_t recurrence_cost(std::span<const TensorSpec> in, const TensorSpec&, const Attrs&) {
  return recurrent_product(in[0].shape, in[1].shape[0]);
}
std::int64_t recurrence_grad_cost(std::span<const TensorSpec> in, const TensorSpec& out, const Attrs&) {
  return recurrent_product(out.shape, in[2].shape[0]);
}
std::int64_t param_grad_cost(std::span<const TensorSpec> in, const TensorSpec&, const Attrs&) {
  return recurrent_product(in[0].shape, in[1].shape[3]);
}

}  // namespace

void define_recurrent_ops() {
  register_op({.name = "Recurrence",
               .num_inputs = -1,
               .infer = recurrence_infer,
               .grad = recurrence_grad,
               .cost = recurrence_cost,
               .flops = recurrence_flops});
  register_op(
      {.name = "RecurrenceGrad", .num_inputs = -1, .infer = recurrence_grad_infer, .cost = recurrence_grad_cost});
  register_op({.name = "RecurrenceParamGrad", .num_inputs = 2, .infer = param_grad_infer, .cost = param_grad_cost});
  register_op({.name = "RecurrenceOutput", .num_inputs = -1, .infer = output_infer, .grad = [](GradBuilder& g) {
                 return masked_op_grad(g, "RecurrenceOutputGrad", g.attrs());
               }});
  register_op({.name = "RecurrenceOutputGrad", .num_inputs = -1, .infer = [](const InferContext& c) {
                 const Shape& ws = c.shape(1);
                 return TensorSpec{DType::kF32, Shape{1, ws[1], ws[2], ws[3]}};
               }});
}

}  // namespace tctl
