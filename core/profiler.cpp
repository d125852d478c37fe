#include "core/profiler.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <optional>
#include <thread>

namespace tctl {

namespace {

// A process-unique serial per thread. Cheaper to compare than std::thread::id, and never reused while the
// process lives, so a lane never mixes two threads.
std::uint64_t this_thread_serial() {
  static std::atomic<std::uint64_t> next{1};
  thread_local const std::uint64_t serial = next.fetch_add(1, std::memory_order_relaxed);
  return serial;
}

double us_between(Profiler::Clock::time_point from, Profiler::Clock::time_point to) {
  return std::chrono::duration<double, std::micro>(to - from).count();
}

void append_escaped(std::string& out, const std::string& s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;  // bytes from 0x80 up pass through: names are UTF-8
        }
    }
  }
  out += '"';
}

// Three decimals: trace timestamps are microseconds, so this keeps nanoseconds.
void append_number(std::string& out, double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  out += buf;
}

// A timed event of a device with its host time: the moment the host saw the stream reach it.
struct Anchor {
  std::shared_ptr<Event> event;
  Profiler::Clock::time_point host;
};

// Records a timed event on `device` and waits (polling, so that an error of queued work stays for the run's
// own synchronize) until the stream reaches it. On an idle stream that is at once. std::nullopt when the
// stream does not get there within a second (a paused simulated stream), or the device cannot record.
std::optional<Anchor> anchor_on(Device& device) {
  std::shared_ptr<Event> event;
  try {
    event = device.record_timed_event();
  } catch (const RuntimeError&) {
    return std::nullopt;  // the run's own synchronize reports a broken device; a profile goes without
  }
  const auto give_up = Profiler::Clock::now() + std::chrono::seconds(1);
  while (!event->done()) {
    if (Profiler::Clock::now() > give_up) return std::nullopt;
    std::this_thread::yield();
  }
  return Anchor{std::move(event), Profiler::Clock::now()};
}

}  // namespace

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kForward:
      return "forward";
    case Phase::kBackward:
      return "backward";
    case Phase::kUpdate:
      return "update";
  }
  return "forward";
}

Profiler::Profiler() : epoch_(Clock::now()) {}

int Profiler::lane_of_this_thread() {
  const std::uint64_t serial = this_thread_serial();
  // A handful of lanes at most (the inter-op threads), so a linear search beats a hash map.
  for (std::size_t i = 0; i < lane_threads_.size(); ++i)
    if (lane_threads_[i] == serial) return static_cast<int>(i);
  lane_threads_.push_back(serial);
  return static_cast<int>(lane_threads_.size() - 1);
}

void Profiler::record(const Node& node, Clock::time_point start, Clock::time_point end, DeviceWork work) {
  std::lock_guard lock(mu_);
  records_.push_back({&node, start, end, lane_of_this_thread(), std::move(work)});
}

void Profiler::collect() {
  std::vector<Pending> finished;
  std::uint64_t generation = 0;
  {
    std::lock_guard lock(mu_);
    events_.reserve(events_.size() + records_.size());
    for (Record& r : records_) {
      ProfileEvent e;
      e.node_id = r.node->id;
      e.name = r.node->name;
      e.op = r.node->op->name;
      e.collective = r.node->op->collective;
      e.layer = r.node->layer;
      e.phase = r.node->phase;
      e.start_us = us_between(epoch_, r.start);
      e.end_us = us_between(epoch_, r.end);
      e.lane = r.lane;
      if (r.work.device != nullptr) e.device = r.work.device->name();
      if (r.work.after != nullptr) pending_.push_back({events_.size(), std::move(r.work)});
      events_.push_back(std::move(e));
    }
    records_.clear();
    finished = take_finished_locked();
    generation = generation_;
  }
  if (!finished.empty()) resolve_device_times(std::move(finished), generation);
}

std::vector<Profiler::Pending> Profiler::take_finished_locked() {
  std::vector<Pending> finished, waiting;
  // The stream runs in order: past `after`, it is past `before` too.
  for (Pending& p : pending_) (p.work.after->done() ? finished : waiting).push_back(std::move(p));
  pending_ = std::move(waiting);
  return finished;
}

void Profiler::resolve_device_times(std::vector<Pending> finished, std::uint64_t generation) {
  // How long before its device's anchor each event's work started and ended, on the device's clock.
  struct Placed {
    std::size_t event;
    Clock::time_point anchor;
    double start_before_us, end_before_us;
  };
  std::vector<Placed> placed;
  std::vector<Pending> unplaced;
  std::map<Device*, std::optional<Anchor>> anchors;
  for (Pending& p : finished) {
    auto [it, added] = anchors.try_emplace(p.work.device);
    if (added) it->second = anchor_on(*p.work.device);
    if (!it->second) {
      unplaced.push_back(std::move(p));
      continue;
    }
    const std::optional<double> start = it->second->event->elapsed_us_since(*p.work.before);
    const std::optional<double> end = it->second->event->elapsed_us_since(*p.work.after);
    // A device that cannot time leaves the event with its host time only.
    if (start && end) placed.push_back({p.event, it->second->host, *start, *end});
  }
  std::lock_guard lock(mu_);
  if (generation != generation_) return;  // cleared meanwhile: the events are gone
  for (const Placed& p : placed) {
    ProfileEvent& e = events_[p.event];
    e.device_timed = true;
    e.device_start_us = us_between(epoch_, p.anchor) - p.start_before_us;
    e.device_end_us = us_between(epoch_, p.anchor) - p.end_before_us;
  }
  for (Pending& p : unplaced) pending_.push_back(std::move(p));
}

std::vector<ProfileEvent> Profiler::events() {
  collect();
  std::lock_guard lock(mu_);
  std::vector<ProfileEvent> out = events_;
  std::stable_sort(out.begin(), out.end(),
                   [](const ProfileEvent& a, const ProfileEvent& b) { return a.start_us < b.start_us; });
  return out;
}

int Profiler::num_lanes() {
  std::lock_guard lock(mu_);
  return static_cast<int>(lane_threads_.size());
}

void Profiler::clear() {
  std::lock_guard lock(mu_);
  records_.clear();
  events_.clear();
  pending_.clear();
  lane_threads_.clear();
  epoch_ = Clock::now();
  ++generation_;
}

namespace {

// One "X" event: `e` from `ts` for `dur` microseconds on track `tid`.
void append_complete(std::string& out, const ProfileEvent& e, double ts, double dur, const std::string& pid, int tid) {
  out += ",\n{\"name\": ";
  append_escaped(out, e.name);
  out += ", \"cat\": \"";
  out += phase_name(e.phase);
  out += "\", \"ph\": \"X\", \"ts\": ";
  append_number(out, ts);
  out += ", \"dur\": ";
  append_number(out, dur);
  out += ", \"pid\": " + pid + ", \"tid\": " + std::to_string(tid) + ", \"args\": {\"op\": ";
  append_escaped(out, e.op);
  out += ", \"layer\": ";
  append_escaped(out, e.layer);
  out += ", \"phase\": \"";
  out += phase_name(e.phase);
  out += "\"";
  // Host work keeps the arguments it always had.
  if (!e.device.empty() && e.device != "cpu") {
    out += ", \"device\": ";
    append_escaped(out, e.device);
  }
  out += "}}";
}

void append_thread_name(std::string& out, const std::string& pid, int tid, const std::string& name) {
  out += ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " + pid + ", \"tid\": " + std::to_string(tid) +
         ", \"args\": {\"name\": ";
  append_escaped(out, name);
  out += "}}";
}

}  // namespace

std::string chrome_trace_json(const std::vector<ProfileEvent>& events, const TraceOptions& options) {
  const std::string pid = std::to_string(options.pid);
  int lanes = 0;
  std::vector<std::string> streams;  // the devices with timed work, by name; their tracks follow the lanes
  for (const ProfileEvent& e : events) {
    lanes = std::max(lanes, e.lane + 1);
    if (e.device_timed && std::find(streams.begin(), streams.end(), e.device) == streams.end())
      streams.push_back(e.device);
  }
  std::sort(streams.begin(), streams.end());
  auto stream_tid = [&](const std::string& device) {
    return lanes + static_cast<int>(std::find(streams.begin(), streams.end(), device) - streams.begin());
  };
  // Data-parallel training's all-reduces also get a track of their own after the streams': the time a step
  // spends exchanging gradients (waiting for the other replicas included) in one row.
  const bool all_reduces =
      std::any_of(events.begin(), events.end(), [](const ProfileEvent& e) { return e.collective; });
  const int all_reduce_tid = lanes + static_cast<int>(streams.size());

  std::string out;
  out.reserve(256 + events.size() * 200);
  out += "{\"traceEvents\": [\n";
  out += "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " + pid + ", \"tid\": 0, \"args\": {\"name\": ";
  append_escaped(out, options.process_name);
  out += "}}";
  for (int lane = 0; lane < lanes; ++lane)
    append_thread_name(out, pid, lane, "executor thread " + std::to_string(lane));
  for (const std::string& device : streams) append_thread_name(out, pid, stream_tid(device), device + " stream");
  if (all_reduces) append_thread_name(out, pid, all_reduce_tid, "all-reduce");
  std::vector<std::string> tracks;  // of the spans, in order of first appearance
  for (const TraceSpan& span : options.spans)
    if (std::find(tracks.begin(), tracks.end(), span.track) == tracks.end()) tracks.push_back(span.track);
  const int first_track = all_reduce_tid + (all_reduces ? 1 : 0);
  for (std::size_t i = 0; i < tracks.size(); ++i)
    append_thread_name(out, pid, first_track + static_cast<int>(i), tracks[i]);
  // A span before the events' epoch (a read that began steps earlier) moves the whole trace later, so that
  // every timestamp is at least 0.
  double origin = 0;
  for (const TraceSpan& span : options.spans) origin = std::min(origin, span.start_us);
  for (const TraceSpan& span : options.spans) {
    const auto track = std::find(tracks.begin(), tracks.end(), span.track) - tracks.begin();
    out += ",\n{\"name\": ";
    append_escaped(out, span.name);
    out += ", \"cat\": \"input\", \"ph\": \"X\", \"ts\": ";
    append_number(out, span.start_us - origin);
    out += ", \"dur\": ";
    append_number(out, span.end_us - span.start_us);
    out +=
        ", \"pid\": " + pid + ", \"tid\": " + std::to_string(first_track + static_cast<int>(track)) + ", \"args\": {}}";
  }
  for (const ProfileEvent& e : events) {
    append_complete(out, e, e.start_us - origin, e.end_us - e.start_us, pid, e.lane);
    if (e.collective) append_complete(out, e, e.start_us - origin, e.end_us - e.start_us, pid, all_reduce_tid);
    if (e.device_timed)
      append_complete(out, e, e.device_start_us - origin, e.device_end_us - e.device_start_us, pid,
                      stream_tid(e.device));
  }
  out += "\n]}\n";
  return out;
}

double node_flops(const Graph& g, const Node& n, std::int64_t batch) {
  if (!n.op->flops) return 0;
  auto with_batch = [&](TensorSpec spec) {
    std::vector<std::int64_t> dims(spec.shape.dims().begin(), spec.shape.dims().end());
    for (auto& d : dims)
      if (d < 0) d = batch;
    spec.shape = Shape(dims);
    return spec;
  };
  std::vector<TensorSpec> inputs;
  for (int in : n.inputs) inputs.push_back(with_batch(g.node(in).spec));
  return static_cast<double>(n.op->flops(inputs, with_batch(n.spec), n.attrs));
}

}  // namespace tctl
