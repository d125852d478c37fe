#include "core/profiler.h"

#include <algorithm>
#include <atomic>
#include <cstdio>

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

void Profiler::record(const Node& node, Clock::time_point start, Clock::time_point end) {
  std::lock_guard lock(mu_);
  records_.push_back({&node, start, end, lane_of_this_thread()});
}

void Profiler::collect() {
  std::lock_guard lock(mu_);
  events_.reserve(events_.size() + records_.size());
  for (const Record& r : records_) {
    ProfileEvent e;
    e.node_id = r.node->id;
    e.name = r.node->name;
    e.op = r.node->op->name;
    e.layer = r.node->layer;
    e.phase = r.node->phase;
    e.start_us = us_between(epoch_, r.start);
    e.end_us = us_between(epoch_, r.end);
    e.lane = r.lane;
    events_.push_back(std::move(e));
  }
  records_.clear();
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
  lane_threads_.clear();
  epoch_ = Clock::now();
}

std::string chrome_trace_json(const std::vector<ProfileEvent>& events, const TraceOptions& options) {
  const std::string pid = std::to_string(options.pid);
  int lanes = 0;
  for (const ProfileEvent& e : events) lanes = std::max(lanes, e.lane + 1);

  std::string out;
  out.reserve(256 + events.size() * 200);
  out += "{\"traceEvents\": [\n";
  out += "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " + pid + ", \"tid\": 0, \"args\": {\"name\": ";
  append_escaped(out, options.process_name);
  out += "}}";
  for (int lane = 0; lane < lanes; ++lane) {
    const std::string tid = std::to_string(lane);
    out += ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " + pid + ", \"tid\": " + tid +
           ", \"args\": {\"name\": \"executor thread " + tid + "\"}}";
  }
  for (const ProfileEvent& e : events) {
    out += ",\n{\"name\": ";
    append_escaped(out, e.name);
    out += ", \"cat\": \"";
    out += phase_name(e.phase);
    out += "\", \"ph\": \"X\", \"ts\": ";
    append_number(out, e.start_us);
    out += ", \"dur\": ";
    append_number(out, e.end_us - e.start_us);
    out += ", \"pid\": " + pid + ", \"tid\": " + std::to_string(e.lane) + ", \"args\": {\"op\": ";
    append_escaped(out, e.op);
    out += ", \"layer\": ";
    append_escaped(out, e.layer);
    out += ", \"phase\": \"";
    out += phase_name(e.phase);
    out += "\"}}";
  }
  out += "\n]}\n";
  return out;
}

}  // namespace tctl
