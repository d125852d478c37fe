#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>

#include <nlohmann/json.hpp>

#include "core/kernel_context.h"
#include "core/profiler.h"
#include "core/session.h"

using namespace tctl;

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

TensorSpec scalar_spec(const InferContext&) { return {DType::kF32, Shape{}}; }
}  // namespace

TCTL_REGISTER_OP({.name = "TestProfilerMeet", .num_inputs = 0, .infer = scalar_spec});
TCTL_REGISTER_KERNEL("TestProfilerMeet", DeviceKind::kCpu, profiler_meet_cpu);

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
