// Profiler: records when each graph node's kernel ran and on which executor thread, for `tensorctl profile`
// and Chrome trace files (Perfetto). Enabled per run through RunOptions::profiler; a run without one pays a
// null-pointer check per node and nothing else. A kernel that queues its work on a device with a stream
// (sim:N, cuda:N) is timed twice: on the host (the time to queue it) and on the device, between two timed
// events of its stream.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/errors.h"
#include "core/graph.h"

namespace tctl {

// One kernel execution. Times are microseconds on the steady clock since the profiler's epoch (its
// construction or last clear()). `lane` is a small integer per thread, 0 for the first thread the profiler
// saw, in order of first appearance; a trace shows one track per lane.
struct ProfileEvent {
  int node_id = -1;
  std::string name;         // the node's unique name, "dense_1/MatMul"
  std::string op;           // "MatMul"
  bool collective = false;  // the op waits for other replicas (OpDef::collective): an all-reduce
  std::string layer;        // "" outside any layer
  Phase phase = Phase::kForward;
  double start_us = 0;  // on the host: the kernel call, which on a device with a stream only queues work
  double end_us = 0;
  int lane = 0;
  // The device that did the work: the node's, or for a copy to the host the device copied from. "" where
  // the recorder did not say (eager mode).
  std::string device;
  // When the device's stream ran the work, on the same time axis as start_us (see Profiler::collect):
  // set for work on a device with a stream once its events are resolved.
  bool device_timed = false;
  double device_start_us = 0;
  double device_end_us = 0;
};

// Where a kernel's work ran: the device, and on a device with a stream two timed events of that stream
// (Device::record_timed_event), recorded just before and just after the kernel queued its work. Without
// the events the work counts as done on the host.
struct DeviceWork {
  Device* device = nullptr;
  std::shared_ptr<Event> before;
  std::shared_ptr<Event> after;
};

// "forward", "backward", "update".
const char* phase_name(Phase phase);

// Collects events from any number of runs and threads. Thread-safe: record() takes a mutex around an
// append of a fixed-size record (the strings are copied later, by collect(), off the kernels' path).
// The graphs whose nodes were recorded must stay alive until collect() or clear(); Session::run collects
// at the end of every profiled run, so its users need not care.
//
// Device times are resolved by collect(), once the stream has passed a record's `after` event (a run has
// synchronized its devices before Session::run collects; a record whose stream has not gets its device
// time at a later collect). Each device's events are placed on the host's clock through an anchor: a
// timed event recorded then, whose host time is taken when the stream is seen to reach it (collect waits
// up to a second for that). A device span is thus never placed before the moment the stream really ran
// it, and is late by at most the time to see the anchor done (a few microseconds on an idle stream).
class Profiler {
 public:
  using Clock = std::chrono::steady_clock;

  Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Records one kernel execution of `node` on the calling thread, from `start` to `end` on the host, and
  // where its work ran. Called by the executor and by eager mode.
  void record(const Node& node, Clock::time_point start, Clock::time_point end, DeviceWork work = {});

  // Turns the records so far into events (copying node names), so their graphs may go away, and gives
  // device times to the events whose streams have passed them.
  void collect();
  // All events collected so far, sorted by start time; collects first.
  std::vector<ProfileEvent> events();
  // Number of lanes seen so far.
  int num_lanes();
  // Forgets every event and lane and restarts the epoch.
  void clear();

 private:
  struct Record {
    const Node* node;
    Clock::time_point start;
    Clock::time_point end;
    int lane;
    DeviceWork work;
  };
  // An event in events_ still waiting for its device time.
  struct Pending {
    std::size_t event;  // index into events_
    DeviceWork work;
  };
  int lane_of_this_thread();  // the caller holds mu_
  // Takes the pending device work whose streams have passed it; the caller holds mu_.
  std::vector<Pending> take_finished_locked();
  // Places `finished` on the time axis (waiting for each device's anchor, without the lock held) and stores
  // the device times in events_, unless clear() came since `generation`; what cannot be placed stays pending.
  void resolve_device_times(std::vector<Pending> finished, std::uint64_t generation);

  std::mutex mu_;
  Clock::time_point epoch_ TCTL_GUARDED_BY(mu_);
  std::uint64_t generation_ TCTL_GUARDED_BY(mu_) = 0;  // counts clear() calls
  std::vector<Record> records_ TCTL_GUARDED_BY(mu_);
  std::vector<ProfileEvent> events_ TCTL_GUARDED_BY(mu_);
  std::vector<Pending> pending_ TCTL_GUARDED_BY(mu_);
  std::vector<std::uint64_t> lane_threads_ TCTL_GUARDED_BY(mu_);  // thread serial of each lane
};

// Work outside the graph that a trace shows beside its kernels (the input pipeline's), on a track of its own
// named `track`, on the same time axis as the events.
struct TraceSpan {
  std::string track;
  std::string name;
  double start_us = 0;
  double end_us = 0;
};

struct TraceOptions {
  std::string process_name = "tensorctl";
  int pid = 1;
  std::vector<TraceSpan> spans;  // each track after the lanes, streams and all-reduce track
};

// The Chrome trace event format, as Perfetto and chrome://tracing load it: {"traceEvents": [...]} with "M"
// metadata events naming the process and one thread per lane, then one "X" (complete) event per profile
// event with name, cat (the phase), ph, ts, dur (microseconds), pid, tid (the lane) and args {op, layer,
// phase}. Strings are escaped as JSON requires. Work on a device with a stream also shows on a track of
// that stream ("sim:0 stream", tids after the lanes, in order of device name): a second "X" event at its
// device time, and both carry args.device. A trace of host work only has neither.
std::string chrome_trace_json(const std::vector<ProfileEvent>& events, const TraceOptions& options = {});

// The floating-point operations of node `n` of `g` (its op's OpDef::flops; 0 for an op without) with every
// unknown (-1) dimension of its input and output specs taken as `batch`.
double node_flops(const Graph& g, const Node& n, std::int64_t batch);

}  // namespace tctl
