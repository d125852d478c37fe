// Profiler: records when each graph node's kernel ran and on which executor thread, for `tensorctl profile`
// and Chrome trace files (Perfetto). Enabled per run through RunOptions::profiler; a run without one pays a
// null-pointer check per node and nothing else.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/errors.h"
#include "core/graph.h"

namespace tctl {

// One kernel execution. Times are microseconds on the steady clock since the profiler's epoch (its
// construction or last clear()). `lane` is a small integer per thread, 0 for the first thread the profiler
// saw, in order of first appearance; a trace shows one track per lane.
struct ProfileEvent {
  int node_id = -1;
  std::string name;   // the node's unique name, "dense_1/MatMul"
  std::string op;     // "MatMul"
  std::string layer;  // "" outside any layer
  Phase phase = Phase::kForward;
  double start_us = 0;
  double end_us = 0;
  int lane = 0;
};

// "forward", "backward", "update".
const char* phase_name(Phase phase);

// Collects events from any number of runs and threads. Thread-safe: record() takes a mutex around an
// append of a fixed-size record (the strings are copied later, by collect(), off the kernels' path).
// The graphs whose nodes were recorded must stay alive until collect() or clear(); Session::run collects
// at the end of every profiled run, so its users need not care.
class Profiler {
 public:
  using Clock = std::chrono::steady_clock;

  Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Records one kernel execution of `node` on the calling thread. Called by the executor.
  void record(const Node& node, Clock::time_point start, Clock::time_point end);

  // Turns the records so far into events (copying node names), so their graphs may go away.
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
  };
  int lane_of_this_thread();  // the caller holds mu_

  std::mutex mu_;
  Clock::time_point epoch_ TCTL_GUARDED_BY(mu_);
  std::vector<Record> records_ TCTL_GUARDED_BY(mu_);
  std::vector<ProfileEvent> events_ TCTL_GUARDED_BY(mu_);
  std::vector<std::uint64_t> lane_threads_ TCTL_GUARDED_BY(mu_);  // thread serial of each lane
};

struct TraceOptions {
  std::string process_name = "tensorctl";
  int pid = 1;
};

// The Chrome trace event format, as Perfetto and chrome://tracing load it: {"traceEvents": [...]} with "M"
// metadata events naming the process and one thread per lane, then one "X" (complete) event per profile
// event with name, cat (the phase), ph, ts, dur (microseconds), pid, tid (the lane) and args {op, layer,
// phase}. Strings are escaped as JSON requires.
std::string chrome_trace_json(const std::vector<ProfileEvent>& events, const TraceOptions& options = {});

}  // namespace tctl
