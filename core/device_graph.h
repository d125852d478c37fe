// Device graphs: a device's part of a plan recorded once and replayed as a whole (Device::begin_recording),
// as a CUDA graph replays a captured stream with one launch where eager execution launches every kernel.
//
// A plan is cut into segments (GraphSegment, core/executor.h): one per device that can record and per
// level, the level counting how often a path into a node left the device and came back, so the host's work
// between (a loss-scale factor, a copy of a flag to the host) runs between two segments and each segment's
// inputs are ready before it starts. A run that uses them goes through Plan::graph_order on the calling
// thread: a node outside every segment runs as usual, a segment runs recorded or eagerly.
//
// The first run of a frame is eager (it warms the device up: handles made, pools grown). The next records
// each segment and launches the recording; later runs launch it again when nothing it names has moved:
// the values it reads from outside, its staging buffers, its variables' buffers and its own outputs. When
// something moved, the segment is recorded again; after kMaxGraphMoves in a row, or where recording failed,
// it runs eagerly for good, and the log says why. A segment that reads a dead value (OpDef::may_skip: a step
// dynamic loss scaling skips) runs eagerly that step, and is recorded afresh at its next live one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/executor.h"

namespace tctl {

// Consecutive runs whose segment had to be recorded again before it is left eager for good.
inline constexpr int kMaxGraphMoves = 4;

// Cuts the plan's nodes on devices that can record into segments and orders the run around them; leaves the
// plan without segments where two devices' segments would need each other.
void plan_device_graphs(Plan& plan);

// One segment's recording in a frame, and what it named.
struct SegmentState {
  std::unique_ptr<Replay> replay;
  std::vector<const void*> signature;  // the addresses the recording named (segment_signature)
  std::vector<const void*> current;    // the addresses now, checked against signature before a replay
  std::vector<Tensor> staging;         // one per GraphSegment::staged member
  int moves = 0;                       // runs in a row that found something moved
  std::string refused;                 // why it stays eager, once it does
};

// A frame's segments (Frame::graphs_).
struct DeviceGraphs {
  explicit DeviceGraphs(const Plan& plan) : segments(plan.graph_segments.size()) {}
  std::vector<SegmentState> segments;
  // Per plan node: the input a staged Copy member reads instead of its producer's value.
  std::vector<const Tensor*> staged_input;
  std::uint64_t runs = 0;
};

// The addresses a recording of `segment` depends on, in a fixed order: the outside values, the staging
// buffers, the variables' buffers, the members' own outputs (GraphSegment::outputs), and last the run's batch
// offset (RunOptions::batch_offset), which a recorded kernel that draws per row (dropout) keeps as it was: a
// data-parallel replica whose share of the batch starts elsewhere, at the same shape, records again. Written
// to `out`, whose buffer is reused: a replay allocates nothing to check them.
void segment_signature(const GraphSegment& segment, const SegmentState& state, const std::vector<Tensor>& values,
                       std::int64_t batch_offset, std::vector<const void*>& out);
// What the entry `index` of segment_signature names, for a message.
std::string signature_entry_name(const Plan& plan, const GraphSegment& segment, std::size_t index);

}  // namespace tctl
