// Kernels of the simulated device (kernels/sim/sim_device.h). Each checks that every buffer it is given lives on
// its own device and throws otherwise, then runs the CPU kernel's arithmetic as work on the device's stream,
// so a model with layers on sim:N computes the same bits as on the CPU. The set is representative, not
// complete: a dense network with ReLU, dropout, softmax cross-entropy and Adam (its updates fused) runs on sim whole,
// also with dynamic loss scaling (AllFinite, MulScalar) and a replica's all-reduce (AllReduce, FlatSlice), and a
// CNN's convolutions and max pooling; any other op falls back to the CPU through placement. A replayed kernel draws
// the replay's step's random numbers.
#include <array>
#include <memory>
#include <vector>

#include "core/kernel_context.h"
#include "kernels/sim/sim_device.h"

namespace tctl::sim {
namespace {

void refuse_foreign(const KernelContext& ctx) {
  const Device& here = ctx.device();
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& in = ctx.input(i);
    if (in.defined() && in.device() != &here)
      throw RuntimeError(here.name() + " kernel of " + ctx.node().name + " refuses input " + std::to_string(i) +
                         ", which lives on " + in.device()->name());
  }
  for (std::size_t i = 0; i < ctx.node().vars.size(); ++i) {
    const Variable& v = *ctx.node().vars[i].var;
    if (v.device() != &here)
      throw RuntimeError(here.name() + " kernel of " + ctx.node().name + " refuses variable " + v.name() +
                         ", which lives on " + v.device()->name());
  }
}

// The CPU's kernel of the node's op, whose arithmetic a sim kernel runs.
KernelFn cpu_arithmetic(const KernelContext& ctx) {
  const KernelFn arithmetic = ctx.node().op->kernel(DeviceKind::cpu());
  TCTL_CHECK(arithmetic != nullptr, "op " + ctx.node().op->name + " has no CPU kernel to simulate");
  return arithmetic;
}

// Runs the CPU's arithmetic for `ctx`. Under a reduced compute type (core/compute_type.h), a product's
// operands (inputs 0 and 1 of MatMul, FusedMatMul and the Conv2D family, the OpDef::products ops sim has; of
// Conv2DInputGrad, dy and the kernel, its third input giving only a shape) are first rounded to
// that type, as a GPU's reduced-precision product reads them, and the arithmetic accumulates in float32 as a
// tensor core does: sim:N trains under mixed_bfloat16 and mixed_float16 with a GPU's rounding (not its bits,
// whose sums run in another order), which the precision tests measure on machines without one.
void run_arithmetic(KernelContext& ctx, KernelFn arithmetic) {
  const ComputeType type = ctx.compute_type();
  if (type == ComputeType::kF32) return arithmetic(ctx);
  const Tensor* const* given = ctx.inputs();
  std::vector<const Tensor*> inputs(given, given + ctx.num_inputs());
  std::array<Tensor, 2> rounded;
  for (std::size_t i = 0; i < rounded.size() && i < inputs.size(); ++i) {
    const Tensor& x = *inputs[i];
    if (!x.defined() || x.dtype() != DType::kF32) continue;
    rounded[i] = Tensor::empty(DType::kF32, x.shape());
    const float* from = static_cast<const float*>(x.raw_data());
    float* to = rounded[i].mutable_data<float>();
    for (std::int64_t k = 0; k < x.num_elements(); ++k) to[k] = round_to(type, from[k]);
    inputs[i] = &rounded[i];
  }
  // The rounded operands are summed by the CPU's float32 arithmetic, not by its own bfloat16 products
  // (kernels/cpu/bf16_product.h), so sim's bits do not depend on the processor.
  ctx.set_inputs(inputs.data());
  ctx.set_compute_type(ComputeType::kF32);
  try {
    arithmetic(ctx);
  } catch (...) {
    ctx.set_inputs(given);
    ctx.set_compute_type(type);
    throw;
  }
  ctx.set_inputs(given);
  ctx.set_compute_type(type);
}

// One kernel call as recorded: what its context named, with the buffers as views that own nothing (the
// frame and the variables keep them, as they keep a captured CUDA graph's), to run again on each replay.
struct RecordedCall {
  const Node* node;
  Device* device;
  TensorSpec spec;
  std::vector<Tensor> inputs;
  std::vector<const Tensor*> input_ptrs;
  Tensor output;
  ThreadPool* intra;
  std::uint64_t seed;
  std::int64_t step;
  std::int64_t batch_offset;
  ComputeType compute_type;
};

// Records the call instead of running it. The output buffer is chosen now, on the host, as a CUDA kernel's
// is when it is captured; a replay writes that buffer whoever holds it.
void record_call(KernelContext& ctx, KernelFn arithmetic) {
  auto call = std::make_shared<RecordedCall>(RecordedCall{.node = &ctx.node(),
                                                          .device = &ctx.device(),
                                                          .spec = ctx.output_spec(),
                                                          .inputs = {},
                                                          .input_ptrs = {},
                                                          .output = ctx.output().unowned(),
                                                          .intra = &ctx.intra(),
                                                          .seed = ctx.seed(),
                                                          .step = ctx.step(),
                                                          .batch_offset = ctx.batch_offset(),
                                                          .compute_type = ctx.compute_type()});
  for (int i = 0; i < ctx.num_inputs(); ++i) call->inputs.push_back(ctx.input(i).unowned());
  for (const Tensor& t : call->inputs) call->input_ptrs.push_back(&t);
  ctx.device().enqueue([call, arithmetic] {
    KernelContext kc(*call->node, *call->device, call->spec, call->input_ptrs.data(), call->output, *call->intra,
                     call->seed, SimDevice::replay_step(*call->device).value_or(call->step));
    kc.set_batch_offset(call->batch_offset);
    kc.set_compute_type(call->compute_type);
    kc.fix_output();
    run_arithmetic(kc, arithmetic);
  });
}

void run_on_stream(KernelContext& ctx) {
  static const DeviceKind sim = device_kind("sim");
  TCTL_CHECK(ctx.device().kind() == sim, "a sim kernel on " + ctx.device().name());
  refuse_foreign(ctx);
  const KernelFn arithmetic = cpu_arithmetic(ctx);
  if (SimDevice::recording_on(ctx.device())) return record_call(ctx, arithmetic);
  // The stream runs the work at once unless a test paused it; synchronizing proves that (it refuses a
  // paused stream holding work) and brings back an error the arithmetic threw.
  ctx.device().enqueue([&] { run_arithmetic(ctx, arithmetic); });
  ctx.device().synchronize();
  TCTL_CHECK(!ctx.previous_output().defined() || ctx.previous_output().device() == &ctx.device(),
             ctx.node().name + " left its output off " + ctx.device().name());
}

// AllReduce waits for the other members: inside the stream's work it would hold the stream from a member
// whose replica shares the device. So it waits for its inputs, then runs the CPU's kernel on the calling
// thread, on its own buffers. A device graph never records it (core/device_graph.cpp: collectives).
void all_reduce_sim(KernelContext& ctx) {
  refuse_foreign(ctx);
  ctx.device().synchronize();
  cpu_arithmetic(ctx)(ctx);
}

constexpr const char* kSimulatedOps[] = {
    "MatMul",
    "FusedMatMul",
    "BiasAdd",
    "BiasAddGrad",
    "Relu",
    "ReluGrad",
    "AddN",
    "Softmax",
    "SparseSoftmaxXent",
    "SparseSoftmaxXentGrad",
    "SoftmaxXent",
    "SoftmaxXentGrad",
    "ApplyAdam",
    "ApplySgd",
    "Increment",
    "AccumulateGradient",
    "MovingAverage",
    "AllFinite",
    "MulScalar",
    "FlatSlice",
    "FusedUpdate",
    "Dropout",
    "DropoutGrad",
    "Conv2D",
    "FusedConv2D",
    "Conv2DInputGrad",
    "Conv2DKernelGrad",
    "MaxPool2D",
    "MaxPool2DGrad",
};

bool register_all() {
  for (const char* op : kSimulatedOps) register_kernel(op, device_kind("sim"), run_on_stream);
  register_kernel("AllReduce", device_kind("sim"), all_reduce_sim);
  return true;
}
[[maybe_unused]] const bool registered = register_all();

}  // namespace
}  // namespace tctl::sim
