// The executor: runs a prepared Plan by dataflow. A node starts when its data and control inputs are done;
// independent nodes run at once on the inter-op pool, and each kernel may split its own work on the
// intra-op pool. Ready nodes run on the thread that made them ready; of the costly ones (PlanNode::hand_off)
// ready at once, all but one go to the pool.
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "core/graph.h"
#include "core/placement.h"
#include "core/thread_pool.h"

namespace tctl {

class Profiler;

// One graph node as this plan runs it, with its concrete output spec for the planned feed shapes.
struct PlanNode {
  const Node* node = nullptr;
  KernelFn kernel = nullptr;
  Device* device = nullptr;
  TensorSpec spec;
  std::vector<int> inputs;      // plan indices of the data inputs
  std::vector<int> successors;  // plan indices waiting on this node (data or control), each once
  int num_predecessors = 0;
  int num_uses = 0;  // data edges leaving this node
  int feed = -1;     // index into the run's feeds, for a fed placeholder
  // A fed placeholder whose every use is a copy (to a device) and which is not fetched itself: a value fed
  // on a device stays there, and the copies take it from where it is, instead of its going to the host
  // first (a training loop that moves the next batch to the GPU while the step before runs).
  bool feed_anywhere = false;
  bool release_after_use = false;
  // A variable read in a plan that writes no variable: the frame keeps its value between runs and reads
  // the variable again only after a write (ReadVariable's kernel).
  bool keep_read = false;
  // Whether another inter-op thread may take the node when it becomes ready together with others. A node
  // too cheap to pay for the trip runs on the thread that made it ready (see Run::run_from).
  bool hand_off = true;
};

// The nodes needed for some fetches and targets, in topological order, with shapes resolved. Immutable
// once built, so any number of runs may share it.
struct Plan {
  std::vector<PlanNode> nodes;
  // The copy nodes placement added where an edge crosses devices (one per value and destination device),
  // and the copies of fetched values to the host. Owned here: the graph itself never changes.
  std::vector<std::unique_ptr<Node>> copy_nodes;
  std::vector<int> roots;
  std::vector<int> fetch_slots;
  std::vector<std::string> placement_warnings;
  // With PlacementOptions::log: "node (Op): device" for every node, copies included.
  std::vector<std::string> placement_log;
  // The devices besides the CPU that run nodes of the plan. A run ends by waiting for their streams, so
  // its work, and any error its queued work raised (a NaN gradient found on a GPU), belongs to that run.
  std::vector<Device*> stream_devices;
  // Whether a node may declare its output dead (OpDef::may_skip): only then does a run track dead values.
  bool may_skip = false;
};

// Throws ShapeError naming the placeholder when a fed value's spec does not fit it.
void check_fed_spec(const Node& placeholder, const TensorSpec& fed);

// Builds a plan. Feeds give the spec each fed node has in this run. Throws RuntimeError when a needed
// placeholder is not fed, and ShapeError when the fed shapes do not fit the graph.
Plan build_plan(const Graph& g, std::span<const Output> feeds, std::span<const TensorSpec> feed_specs,
                std::span<const Output> fetches, std::span<const Output> targets, const PlacementOptions& placement);

// The activations of one run. Frames are reused between runs of a plan, which is how steady-state steps
// avoid allocating: a buffer is reused when no fetched result still holds it.
struct Frame {
  explicit Frame(const Plan& plan);
  std::vector<Tensor>& values() { return values_; }

  // The executor's bookkeeping for the run in progress.
  std::vector<Tensor> values_;
  std::unique_ptr<std::atomic<int>[]> pending_;
  std::unique_ptr<std::atomic<int>[]> uses_left_;
  // Per node: the write count of a kept variable read's value (PlanNode::keep_read).
  std::unique_ptr<std::uint64_t[]> read_writes_;
  // Per node, with Plan::may_skip: 1 when its output is dead (skipped). Each entry is written by the thread
  // that ran the node before its successors become ready, so the pending counts order it.
  std::unique_ptr<char[]> dead_;
  std::vector<int> caller_roots_;  // the roots the calling thread runs itself
  std::atomic<int> remaining_{0};
  std::atomic<bool> failed_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ TCTL_GUARDED_BY(mu_) = false;
  std::exception_ptr error_ TCTL_GUARDED_BY(mu_);
};

struct RunContext {
  ThreadPool* inter = nullptr;
  ThreadPool* intra = nullptr;
  std::uint64_t seed = 0;
  std::int64_t step = 0;
  // When set, every kernel execution is recorded into it; null costs one pointer check per node.
  Profiler* profiler = nullptr;
  std::int64_t batch_offset = 0;  // RunOptions::batch_offset
};

class Executor {
 public:
  // Runs every node of the plan (a node that reads a dead value is skipped: OpDef::may_skip; a fetched
  // value that is dead comes back undefined). Feeds are the run's fed tensors in plan feed order. The first exception
  // a kernel throws cancels the nodes not yet started and is rethrown here, on the calling thread.
  static void run(const Plan& plan, Frame& frame, std::span<const Tensor> feeds, const RunContext& ctx);
};

}  // namespace tctl
