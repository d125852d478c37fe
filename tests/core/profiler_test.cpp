#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/kernel_context.h"
#include "core/profiler.h"
#include "core/scalar_spec.h"
#include "core/session.h"
#include "kernels/sim/sim_device.h"

using namespace tctl;
using testing::scalar_spec;

namespace {
// A test op that waits (up to 10 s) until two instances are running at once, so two independent nodes
// overlap on two threads for certain without measuring any time.
struct Rendezvous {
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
};
Rendezvous g_rendezvous;

void profiler_meet_cpu(KernelContext& ctx) {
  std::unique_lock lock(g_rendezvous.mu);
  ++g_rendezvous.arrived;
  g_rendezvous.cv.notify_all();
  g_rendezvous.cv.wait_for(lock, std::chrono::seconds(10), [] { return g_rendezvous.arrived >= 2; });
  ctx.output().mutable_data<float>()[0] = 1.0f;
}

}  // namespace

TCTL_REGISTER_OP({.name = "TestProfilerMeet", .num_inputs = 0, .infer = scalar_spec});
TCTL_REGISTER_KERNEL("TestProfilerMeet", "cpu", profiler_meet_cpu);

namespace {
void profiler_exchange_cpu(KernelContext& ctx) { ctx.output().mutable_data<float>()[0] = 2.0f; }
}  // namespace
// A collective that is not AllReduce: the trace's all-reduce track follows the op's flag, not its name.
TCTL_REGISTER_OP({.name = "TestProfilerExchange", .num_inputs = 0, .infer = scalar_spec, .collective = true});
TCTL_REGISTER_KERNEL("TestProfilerExchange", "cpu", profiler_exchange_cpu);

TEST_CASE("a profiled collective op's events carry its flag, and the trace gives them the all-reduce track") {
  auto g = std::make_shared<Graph>();
  Output exchange = g->add("TestProfilerExchange", {});
  Output sum = g->add("Add", {exchange, exchange});
  ThreadPool inter(1), intra(1);
  Session s(g, inter, intra);
  std::vector<Output> fetch{sum};
  Profiler profiler;
  RunOptions options;
  options.profiler = &profiler;
  s.run({}, fetch, {}, options);
  const std::vector<ProfileEvent> events = profiler.events();
  REQUIRE(events.size() == 2);
  for (const ProfileEvent& e : events) CHECK(e.collective == (e.op == "TestProfilerExchange"));
  const std::string trace = chrome_trace_json(events);
  CHECK(trace.find("\"all-reduce\"") != std::string::npos);
}

TEST_CASE("node_flops: the op's flops function with unknown dimensions taken as the batch") {
  Graph g;
  Output x = g.placeholder("x", DType::kF32, Shape{-1, 8});
  Output w = g.placeholder("w", DType::kF32, Shape{8, 4});
  Output y = g.add("MatMul", {x, w});
  CHECK(node_flops(g, g.node(y), 3) == 2.0 * 3 * 8 * 4);
  // An op without a flops function (Relu) counts none.
  CHECK(node_flops(g, g.node(g.add("Relu", {y})), 3) == 0);
}

TEST_CASE("a profiled run records every executed node once, with end >= start") {
  auto g = std::make_shared<Graph>();
  Output x = g->placeholder("x", DType::kF32, Shape{3});
  Output a = g->add("Scale", {x}, Attrs{{"factor", 2.0}});
  Output b = g->add("Relu", {x});
  Output sum = g->add("Add", {a, b});
  ThreadPool inter(2), intra(1);
  Session s(g, inter, intra);
  std::vector<Feed> feeds{{x, Tensor::filled(Shape{3}, 1.0f)}};
  std::vector<Output> fetch{sum};
  Profiler profiler;
  RunOptions options;
  options.profiler = &profiler;
  s.run(feeds, fetch, {}, options);

  std::vector<ProfileEvent> events = profiler.events();
  // The fed placeholder runs no kernel, so it has no event.
  REQUIRE(events.size() == 3);
  std::multiset<int> ids;
  for (const ProfileEvent& e : events) {
    ids.insert(e.node_id);
    CHECK(e.end_us >= e.start_us);
    CHECK(e.start_us >= 0);
    CHECK(e.name == g->node(e.node_id).name);
    CHECK(e.op == g->node(e.node_id).op->name);
  }
  CHECK(ids == std::multiset<int>{a.node, b.node, sum.node});
  // Data edges show in the times: Add starts after both its inputs ended.
  const ProfileEvent& last = events.back();
  CHECK(last.node_id == sum.node);
  for (const ProfileEvent& e : events)
    if (e.node_id != sum.node) CHECK(last.start_us >= e.end_us);
}

TEST_CASE("a profiled node carries its layer and phase") {
  auto g = std::make_shared<Graph>();
  Output y;
  {
    Graph::Scope scope(*g, "dense_1", "cpu", Phase::kBackward);
    y = g->add("Scale", {g->scalar(1.0f)}, Attrs{{"factor", 3.0}});
  }
  ThreadPool inter(1), intra(1);
  Session s(g, inter, intra);
  Profiler profiler;
  RunOptions options;
  options.profiler = &profiler;
  std::vector<Output> fetch{y};
  s.run({}, fetch, {}, options);
  bool found = false;
  for (const ProfileEvent& e : profiler.events()) {
    if (e.node_id != y.node) continue;
    found = true;
    CHECK(e.layer == "dense_1");
    CHECK(e.phase == Phase::kBackward);
    CHECK(e.lane == 0);
  }
  CHECK(found);
}

TEST_CASE("with two inter-op threads, two independent nodes are recorded on two lanes") {
  auto g = std::make_shared<Graph>();
  Output a = g->add("TestProfilerMeet", {});
  Output b = g->add("TestProfilerMeet", {});
  Output sum = g->add("Add", {a, b});
  g_rendezvous.arrived = 0;
  ThreadPool inter(2), intra(1);
  Session s(g, inter, intra);
  Profiler profiler;
  RunOptions options;
  options.profiler = &profiler;
  std::vector<Output> fetch{sum};
  CHECK(s.run({}, fetch, {}, options)[0].item() == 2.0f);

  std::set<int> meet_lanes;
  for (const ProfileEvent& e : profiler.events())
    if (e.op == "TestProfilerMeet") meet_lanes.insert(e.lane);
  CHECK(meet_lanes.size() == 2);
  CHECK(profiler.num_lanes() == 2);
}

TEST_CASE("a run without a profiler records nothing") {
  auto g = std::make_shared<Graph>();
  Output y = g->add("Scale", {g->scalar(1.0f)}, Attrs{{"factor", 3.0}});
  ThreadPool inter(2), intra(1);
  Session s(g, inter, intra);
  Profiler profiler;
  std::vector<Output> fetch{y};
  s.run({}, fetch);
  CHECK(profiler.events().empty());
  RunOptions options;
  options.profiler = &profiler;
  s.run({}, fetch, {}, options);
  CHECK(profiler.events().size() == 2);  // the Const and the Scale
  s.run({}, fetch);
  CHECK(profiler.events().size() == 2);
  profiler.clear();
  CHECK(profiler.events().empty());
  CHECK(profiler.num_lanes() == 0);
}

TEST_CASE("the Chrome trace has the required keys for every event and escapes names") {
  std::vector<ProfileEvent> events;
  ProfileEvent quoted;
  quoted.node_id = 4;
  quoted.name = "odd \"name\"\\ with\ttab";
  quoted.op = "Scale";
  quoted.layer = "dense_\"1\"";
  quoted.phase = Phase::kUpdate;
  quoted.start_us = 1.5;
  quoted.end_us = 4.25;
  quoted.lane = 1;
  ProfileEvent plain = quoted;
  plain.name = "dense_1/MatMul";
  plain.op = "MatMul";
  plain.layer = "";
  plain.phase = Phase::kForward;
  plain.lane = 0;
  events.push_back(plain);
  events.push_back(quoted);

  TraceOptions options;
  options.process_name = "tensorctl \"test\"";
  nlohmann::json trace = nlohmann::json::parse(chrome_trace_json(events, options));
  REQUIRE(trace.contains("traceEvents"));
  const auto& list = trace["traceEvents"];
  REQUIRE(list.is_array());

  int metadata = 0;
  std::vector<nlohmann::json> complete;
  std::set<int> named_threads;
  for (const auto& e : list) {
    for (const char* key : {"name", "ph", "pid", "tid"}) CHECK(e.contains(key));
    if (e["ph"] == "M") {
      ++metadata;
      CHECK(e["args"].contains("name"));
      if (e["name"] == "process_name") CHECK(e["args"]["name"] == "tensorctl \"test\"");
      if (e["name"] == "thread_name") named_threads.insert(e["tid"].get<int>());
      continue;
    }
    CHECK(e["ph"] == "X");
    for (const char* key : {"cat", "ts", "dur", "args"}) CHECK(e.contains(key));
    for (const char* key : {"op", "layer", "phase"}) CHECK(e["args"].contains(key));
    complete.push_back(e);
  }
  CHECK(metadata == 3);  // the process and two lanes
  CHECK(named_threads == std::set<int>{0, 1});
  REQUIRE(complete.size() == 2);
  CHECK(complete[0]["name"] == "dense_1/MatMul");
  CHECK(complete[0]["args"]["phase"] == "forward");
  CHECK(complete[1]["name"] == "odd \"name\"\\ with\ttab");
  CHECK(complete[1]["args"]["layer"] == "dense_\"1\"");
  CHECK(complete[1]["cat"] == "update");
  CHECK(complete[1]["tid"] == 1);
  CHECK(complete[1]["ts"].get<double>() == doctest::Approx(1.5));
  CHECK(complete[1]["dur"].get<double>() == doctest::Approx(2.75));
}

TEST_CASE("the trace of a real run parses and has one complete event per recorded node") {
  auto g = std::make_shared<Graph>();
  Output y = g->scalar(1.0f);
  for (int i = 0; i < 5; ++i) y = g->add("Scale", {y}, Attrs{{"factor", 2.0}});
  ThreadPool inter(2), intra(1);
  Session s(g, inter, intra);
  Profiler profiler;
  RunOptions options;
  options.profiler = &profiler;
  std::vector<Output> fetch{y};
  s.run({}, fetch, {}, options);
  std::vector<ProfileEvent> events = profiler.events();
  nlohmann::json trace = nlohmann::json::parse(chrome_trace_json(events));
  int complete = 0;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X") {
      ++complete;
      CHECK(e["dur"].get<double>() >= 0);
    }
  CHECK(complete == static_cast<int>(events.size()));
  CHECK(complete == 6);
}

TEST_CASE("all-reduces get a track of their own in the trace, besides their executor thread's") {
  std::vector<ProfileEvent> events(3);
  events[0].name = "dense/MatMul";
  events[0].op = "MatMul";
  events[0].end_us = 1.0;
  events[1].name = "all_reduce/AllReduce";
  events[1].op = "AllReduce";
  events[1].collective = true;
  events[1].start_us = 1.0;
  events[1].end_us = 4.0;
  events[1].lane = 1;
  events[2].name = "all_reduce/AllReduce_1";
  events[2].op = "AllReduce";
  events[2].collective = true;
  events[2].start_us = 4.0;
  events[2].end_us = 5.0;
  nlohmann::json trace = nlohmann::json::parse(chrome_trace_json(events));
  int track = -1;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["args"]["name"] == "all-reduce") track = e["tid"].get<int>();
  REQUIRE(track == 2);  // after the two executor threads
  std::vector<std::string> on_track;
  int complete = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    ++complete;
    if (e["tid"] == track) on_track.push_back(e["name"].get<std::string>());
  }
  CHECK(complete == 5);  // each event on its thread, the two all-reduces again on their track
  CHECK(on_track == std::vector<std::string>{"all_reduce/AllReduce", "all_reduce/AllReduce_1"});
  // Without all-reduces, no such track.
  events.resize(1);
  CHECK(chrome_trace_json(events).find("all-reduce") == std::string::npos);
}

namespace {
// x (fed on the host) -> three Relus on sim:0 -> Scale on the host, profiled: placement adds a copy to sim:0
// before the Relus and one back to the host after them.
struct SimChain {
  std::shared_ptr<Graph> g = std::make_shared<Graph>();
  Output x, relus[3], y;
  SimChain() {
    x = g->placeholder("x", DType::kF32, Shape{4});
    {
      Graph::Scope scope(*g, "hidden", "sim:0", Phase::kForward);
      relus[0] = g->add("Relu", {x});
      relus[1] = g->add("Relu", {relus[0]});
      relus[2] = g->add("Relu", {relus[1]});
    }
    y = g->add("Scale", {relus[2]}, Attrs{{"factor", 2.0}});
  }
  // The nodes whose work runs on sim:0's stream, in the order the stream runs them.
  std::vector<std::string> stream_order() const {
    return {"x/copy_to_sim:0", g->node(relus[0]).name, g->node(relus[1]).name, g->node(relus[2]).name,
            g->node(relus[2]).name + "/copy_to_cpu"};
  }
  std::vector<ProfileEvent> profile() const {
    ThreadPool inter(1), intra(1);
    Session s(g, inter, intra);
    Profiler profiler;
    RunOptions options;
    options.profiler = &profiler;
    std::vector<Feed> feeds{{x, Tensor::filled(Shape{4}, -1.0f)}};
    std::vector<Output> fetch{y};
    s.run(feeds, fetch, {}, options);
    return profiler.events();
  }
};
}  // namespace

TEST_CASE("work on sim:0 carries its device and device times, in the order its stream ran it, copies included") {
  const SimChain chain;
  const std::vector<ProfileEvent> events = chain.profile();
  REQUIRE(events.size() == 6);
  std::vector<ProfileEvent> on_stream;
  for (const ProfileEvent& e : events) {
    if (e.op == "Scale") {
      CHECK(e.device == "cpu");
      CHECK_FALSE(e.device_timed);
      continue;
    }
    // The copy back to the host runs on the stream it copies from.
    CHECK_MESSAGE(e.device == "sim:0", e.name);
    REQUIRE_MESSAGE(e.device_timed, e.name);
    CHECK(e.device_end_us >= e.device_start_us);
    // The anchor places device work no earlier than the stream really ran it, so never before its launch.
    CHECK(e.device_start_us >= e.start_us - 1e-3);
    on_stream.push_back(e);
  }
  std::sort(on_stream.begin(), on_stream.end(),
            [](const ProfileEvent& a, const ProfileEvent& b) { return a.device_start_us < b.device_start_us; });
  std::vector<std::string> order;
  for (const ProfileEvent& e : on_stream) order.push_back(e.name);
  CHECK(order == chain.stream_order());
  for (std::size_t i = 1; i < on_stream.size(); ++i)
    CHECK(on_stream[i].device_start_us >= on_stream[i - 1].device_end_us);
}

TEST_CASE("the Chrome trace puts sim:0's work on a track of its own, copies too, and keeps every host launch") {
  const SimChain chain;
  const std::vector<ProfileEvent> events = chain.profile();
  nlohmann::json trace = nlohmann::json::parse(chrome_trace_json(events));
  std::map<int, std::string> tracks;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name") tracks[e["tid"].get<int>()] = e["args"]["name"];
  CHECK(tracks == std::map<int, std::string>{{0, "executor thread 0"}, {1, "sim:0 stream"}});
  std::vector<std::pair<double, std::string>> on_stream;
  int on_host = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const bool host_op = e["args"]["op"] == "Scale";
    CHECK(e["args"].contains("device") == !host_op);  // host work keeps the arguments it always had
    if (e["tid"] == 0) {
      ++on_host;
      continue;
    }
    CHECK(e["tid"] == 1);
    CHECK(e["args"]["device"] == "sim:0");
    CHECK(e["dur"].get<double>() >= 0);
    on_stream.emplace_back(e["ts"].get<double>(), e["name"].get<std::string>());
  }
  CHECK(on_host == 6);
  std::sort(on_stream.begin(), on_stream.end());
  std::vector<std::string> names;
  for (const auto& [ts, name] : on_stream) names.push_back(name);
  CHECK(names == chain.stream_order());
}

TEST_CASE("device work its stream has not run yet gets its device time at a later collect; clear() drops it") {
  using namespace std::chrono_literals;
  SimDevice& d = static_cast<SimDevice&>(*DeviceRegistry::instance().find("sim:1"));
  d.synchronize();
  auto g = std::make_shared<Graph>();
  const Node& node = g->node(g->add("Relu", {g->scalar(1.0f)}));
  Profiler profiler;
  auto queue_and_record = [&] {
    const auto start = Profiler::Clock::now();
    DeviceWork work{.device = &d, .before = d.record_timed_event()};
    d.enqueue([] { std::this_thread::sleep_for(2ms); });
    work.after = d.record_timed_event();
    profiler.record(node, start, Profiler::Clock::now(), std::move(work));
  };
  d.pause();
  queue_and_record();
  REQUIRE(profiler.events().size() == 1);  // collects: the name is copied, the device time must wait
  CHECK(profiler.events()[0].device == "sim:1");
  CHECK_FALSE(profiler.events()[0].device_timed);
  d.resume();
  const ProfileEvent e = profiler.events()[0];
  REQUIRE(e.device_timed);
  CHECK(e.device_end_us - e.device_start_us >= 2000.0);  // the work slept 2 ms on the stream
  CHECK(e.device_start_us >= e.start_us - 1e-3);
  CHECK(e.device_end_us >= e.end_us);  // the stream ran the work after the host had queued it

  profiler.clear();
  d.pause();
  queue_and_record();
  profiler.collect();
  profiler.clear();
  // Host work recorded after clear() gets no device time from what clear() dropped.
  profiler.record(node, Profiler::Clock::now(), Profiler::Clock::now(), {.device = cpu_device()});
  d.resume();
  const std::vector<ProfileEvent> after_clear = profiler.events();
  REQUIRE(after_clear.size() == 1);
  CHECK(after_clear[0].device == "cpu");
  CHECK_FALSE(after_clear[0].device_timed);
}
