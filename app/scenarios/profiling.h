// Profiling a model's training step: per-layer forward and backward kernel times from the executor's
// profiler, the step's wall time, and what the thread settings buy (`tensorctl profile`). Where layers run
// on a device with a stream (sim:N, cuda:N), the kernel times are the host's (the time to queue the work)
// and the device's own times come beside them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/profiler.h"
#include "models/record/train_config.h"

namespace tctl {

struct ProfileOptions {
  std::int64_t batch_size = 32;
  std::int64_t iterations = 20;
  std::int64_t warmup = 3;
  int inter_op_threads = 1;
  int intra_op_threads = 1;
  bool forward_only = false;
  bool eager = false;  // run the step eagerly (core/eager.h) instead of as one traced graph
};

// Microseconds over the measured iterations.
struct TimeStats {
  double median = 0, min = 0, max = 0;
};
TimeStats time_stats(std::vector<double> samples);

// One row of the per-layer table: a layer, or "optimizer" / "loss" for the nodes outside any layer.
struct LayerProfile {
  std::string name;
  std::string type;
  std::string output_shape;  // "(None, 128)"
  std::int64_t params = 0;
  TimeStats forward;
  TimeStats backward;  // the update phase counts here for the optimizer row
  double flops = 0;    // per step, forward and backward: products, convolutions and pooling windows
  // Per step, forward and backward, the time its work took on devices with a stream (copies of its values
  // included), from the devices' events; zero where none of it ran there.
  TimeStats device;
};

// One graph node, for --ops.
struct OpProfile {
  std::string layer;
  std::string name;
  std::string op;
  std::string phase;
  TimeStats time;
  TimeStats device;  // on its device's stream; zero for work the host does
};

// A device with a stream that ran work in the step: how long per step its stream was busy with it.
struct StreamProfile {
  std::string device;  // "sim:0"
  TimeStats busy;
};

struct ProfileReport {
  std::vector<LayerProfile> layers;
  std::vector<OpProfile> ops;
  TimeStats step;        // wall time of one step, profiled
  TimeStats unprofiled;  // the same steps without the profiler, run alternately: the profiler's cost
  TimeStats kernels;     // sum of the kernel times in one step
  // A config with data: the seconds preparing it took once (reading, decoding images or vectorizing text,
  // splitting, standardizing) and each measured step's gather of its batch from it, which the step waits for
  // when train does not prefetch; has_input is false for random inputs.
  bool has_input = false;
  double prepare_seconds = 0;
  TimeStats input;
  double samples_per_second = 0;
  std::vector<StreamProfile> streams;     // by device name; empty when every node ran on the host
  std::vector<ProfileEvent> last_events;  // the last measured step, for --trace
  std::vector<TraceSpan> trace_spans;     // its work outside the graph (gathering its batch), for --trace
  int inter_op_threads = 1;
  int intra_op_threads = 1;
  bool eager = false;
  std::vector<std::string> placement_warnings;  // Model::placement_warnings
};

// Profiles `config`'s model on batches of its data (when the config has data), gathered per step as train
// gathers them, or on random inputs of the model's input shape. A model spec without a config is wrapped in a config
// with default training keys; a config whose loss is empty has none, and must be profiled forward only.
ProfileReport profile_training(const TrainConfig& config, const ProfileOptions& options);

}  // namespace tctl
