// KernelContext: everything one kernel invocation sees: its node, its inputs, its output slot, the intra-op
// pool, and the random stream of this step (drawn with core/counter_random.h).
#pragma once

#include <cstdint>

#include "core/compute_type.h"
#include "core/counter_random.h"
#include "core/graph.h"
#include "core/thread_pool.h"

namespace tctl {

class KernelContext {
 public:
  KernelContext(const Node& node, Device& device, const TensorSpec& spec, const Tensor* const* inputs, Tensor& output,
                ThreadPool& intra, std::uint64_t seed, std::int64_t step)
      : node_(node),
        device_(device),
        spec_(spec),
        inputs_(inputs),
        output_(output),
        intra_(intra),
        seed_(seed),
        step_(step) {}

  const Node& node() const { return node_; }
  // The device the kernel runs on; output() allocates there, and every input lives there.
  Device& device() const { return device_; }
  const Attrs& attrs() const { return node_.attrs; }
  int num_inputs() const { return static_cast<int>(node_.inputs.size()); }
  const Tensor& input(int i) const { return *inputs_[i]; }
  // The inputs as given, and other inputs (as many, with the same specs) in their place: how a backend hands
  // its arithmetic converted copies (sim's reduced-precision operands) and puts the given ones back after.
  const Tensor* const* inputs() const { return inputs_; }
  void set_inputs(const Tensor* const* inputs) { inputs_ = inputs; }
  // The concrete output spec the plan inferred for this run.
  const TensorSpec& output_spec() const { return spec_; }

  // The output tensor, allocated with the planned spec. The buffer of the previous step is reused when
  // nobody else holds it any more, so steady-state steps allocate nothing.
  Tensor& output();
  // Makes output() return the slot as it is, whoever else holds its buffer: a replayed kernel writes the
  // buffer it was recorded with (Device::begin_recording).
  void fix_output() { fixed_output_ = true; }
  // Publishes an existing tensor as the output instead (a variable read, a reshape).
  void set_output(Tensor t) { output_ = std::move(t); }
  // What the output slot holds before the kernel runs: the last run's output, or nothing.
  const Tensor& previous_output() const { return output_; }
  // For an op with OpDef::may_skip: the output is dead, and every node reading it is skipped.
  void skip() { skipped_ = true; }
  bool skipped() const { return skipped_; }

  // For a variable read whose value the frame keeps between runs (its plan never writes the variable):
  // the write count of the kept value. Null for every other node.
  std::uint64_t* kept_read() const { return kept_read_; }
  void set_kept_read(std::uint64_t* writes) { kept_read_ = writes; }

  Variable& var(int i) const { return *node_.vars[static_cast<std::size_t>(i)].var; }

  ThreadPool& intra() const { return intra_; }
  void parallel_for(std::int64_t n, std::int64_t grain, FunctionRef<void(std::int64_t, std::int64_t)> fn) const {
    intra_.parallel_for(n, grain, fn);
  }

  // A 64-bit key for counter-based random numbers, unique to (session seed, stream, step); `stream` is
  // normally the node id, so a gradient op can replay its forward op's stream.
  std::uint64_t random_key(std::int64_t stream) const;
  // What random_key mixes with the step: a device that replays recorded work computes the key of each
  // replay's step from it (kernels/cuda/launch.h's StepKey).
  std::uint64_t random_key_base(std::int64_t stream) const;
  std::int64_t step() const { return step_; }
  std::uint64_t seed() const { return seed_; }
  // Rows of the global batch before this run's: a replica of data-parallel training runs rows
  // [batch_offset, batch_offset + its batch) of the step's batch, and a random stream drawn per element
  // (dropout's mask) continues from there, so the replicas draw what one replica would for the whole batch.
  std::int64_t batch_offset() const { return batch_offset_; }
  void set_batch_offset(std::int64_t rows) { batch_offset_ = rows; }
  // The type the run's products read their operands in (core/compute_type.h); kF32 for an op that is not a
  // product (OpDef::products), whatever the run's.
  ComputeType compute_type() const { return node_.op->products ? compute_type_ : ComputeType::kF32; }
  void set_compute_type(ComputeType t) { compute_type_ = t; }
  // The first element index of this run's rows in a per-element stream over a tensor shaped [batch, ...].
  std::uint64_t first_element(const Tensor& t) const;

 private:
  const Node& node_;
  Device& device_;
  const TensorSpec& spec_;
  const Tensor* const* inputs_;
  Tensor& output_;
  ThreadPool& intra_;
  std::uint64_t seed_;
  std::int64_t step_;
  std::uint64_t* kept_read_ = nullptr;
  std::int64_t batch_offset_ = 0;
  ComputeType compute_type_ = ComputeType::kF32;
  bool skipped_ = false;
  bool fixed_output_ = false;
};

}  // namespace tctl
