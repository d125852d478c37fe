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
#include <string>
#include <vector>

#include "core/compute_type.h"
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

// A run of one device's nodes that the device may record once and replay as a whole (Device::begin_recording;
// a CUDA graph): core/device_graph.h says how a plan is cut into them and how a run uses them.
struct GraphSegment {
  Device* device = nullptr;
  // How many times a path into it left the device for the host (or another device) and came back: the
  // segments of one device run in this order, with the host's work between them.
  int level = 0;
  std::vector<int> members;  // plan indices, in an order that respects their edges
  // The members that are Copy nodes taking a value made outside the segment: each copies from a staging
  // buffer of the segment's own, filled before every launch, so the recorded copy reads a fixed address.
  std::vector<int> staged;
  // Values made outside the segment on its device that members read in place (checked unmoved before a replay).
  std::vector<int> outside;
  std::vector<Variable*> vars;     // every variable a member reads or writes (checked unmoved likewise)
  std::vector<Variable*> written;  // those a member writes
  // The members whose output buffer is their own (checked unmoved): not a variable read's, which is the
  // variable's, nor a constant's.
  std::vector<int> outputs;
  // Variable reads (and constants) whose buffers a recording names: `lent` are members, `borrowed` belong
  // to another segment. Their slots in the frame are filled only to record or run the segment eagerly, and
  // emptied after, so the frame holds no read of a variable a later segment writes in place.
  std::vector<int> lent;
  std::vector<int> borrowed;
  // Why the segment is never recorded ("" when it may be): one line naming the node and the reason.
  std::string refused;
  std::string name;  // "sim:0 segment 0 (level 0, 14 nodes)"
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
  // Filled by plan_device_graphs (core/device_graph.h) for a session that records: the segments, and an
  // order of the run in which each segment is one entry, -1 - its index, among the other nodes' indices.
  std::vector<GraphSegment> graph_segments;
  std::vector<int> graph_order;
};

// Throws ShapeError naming the placeholder when a fed value's spec does not fit it.
void check_fed_spec(const Node& placeholder, const TensorSpec& fed);

// Builds a plan. Feeds give the spec each fed node has in this run. Throws RuntimeError when a needed
// placeholder is not fed, and ShapeError when the fed shapes do not fit the graph.
Plan build_plan(const Graph& g, std::span<const Output> feeds, std::span<const TensorSpec> feed_specs,
                std::span<const Output> fetches, std::span<const Output> targets, const PlacementOptions& placement);

struct DeviceGraphs;

// The activations of one run. Frames are reused between runs of a plan, which is how steady-state steps
// avoid allocating: a buffer is reused when no fetched result still holds it.
struct Frame {
  explicit Frame(const Plan& plan);
  ~Frame();
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
  // The segments' recordings and staging buffers (core/device_graph.h), made by the first run that uses them.
  std::unique_ptr<DeviceGraphs> graphs_;
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
  std::int64_t batch_offset = 0;                 // RunOptions::batch_offset
  ComputeType compute_type = ComputeType::kF32;  // SessionOptions::compute_type
  // Whether the plan's graph segments are recorded and replayed (SessionOptions::device_graphs).
  bool device_graphs = false;
  // Lines for the placement log about the segments (recorded, refused and why); null: none kept.
  std::vector<std::string>* graph_log = nullptr;
  // Counts the replays launched, for tests and the profile; may be null.
  std::atomic<std::uint64_t>* graph_replays = nullptr;
};

class Executor {
 public:
  // Runs every node of the plan (a node that reads a dead value is skipped: OpDef::may_skip; a fetched
  // value that is dead comes back undefined). Feeds are the run's fed tensors in plan feed order. The first exception
  // a kernel throws cancels the nodes not yet started and is rethrown here, on the calling thread.
  static void run(const Plan& plan, Frame& frame, std::span<const Tensor> feeds, const RunContext& ctx);
};

}  // namespace tctl
