// tensorctl profile end to end: the per-layer table, the sweep, the trace file's schema, bad input.
#include <doctest/doctest.h>

#include <map>
#include <set>

#include "cli/cli_test_util.h"

using namespace tctl::cli_test;

TEST_CASE("profile prints the per-layer table, the overhead and a thread sweep") {
  TempDir dir;
  CommandResult r = run_tensorctl("profile " + quoted(source_path("configs/digits_mlp.json")) +
                                      " --iterations 3 --warmup 1 --inter-op-threads 1,2 --ops",
                                  dir.path());
  REQUIRE(r.status == 0);
  for (const char* needle : {"dense (Dense)", "dense_1 (Dense)", "dense_2 (Dense)", "optimizer", "dense/MatMul",
                             "forward ms", "backward ms", "GFLOP/s", "step ", "Thread sweep", "speed-up"})
    CHECK(r.out.find(needle) != std::string::npos);
  // Every node ran on the host: no device column, no stream line.
  CHECK(r.out.find("device ms") == std::string::npos);
  CHECK(r.out.find(" stream busy ") == std::string::npos);
}

TEST_CASE("profile of a bare model spec runs on random inputs; --json has every layer") {
  TempDir dir;
  CommandResult r = run_tensorctl(
      "profile " + quoted(source_path("configs/models/iris_mlp.json")) + " --iterations 2 --batch-size 8 --json",
      dir.path());
  REQUIRE(r.status == 0);
  auto doc = parse_json(r.out);
  const auto& run = doc.at("runs").at(0);
  std::set<std::string> names;
  for (const auto& l : run.at("layers")) names.insert(l.at("name").get<std::string>());
  CHECK(names.count("dense"));
  CHECK(names.count("dense_1"));
  CHECK(run.at("samples_per_second").get<double>() > 0);
  // A host-only profile has no device times.
  CHECK_FALSE(run.contains("streams"));
  for (const auto& l : run.at("layers")) CHECK_FALSE(l.contains("device"));
}

TEST_CASE("a profile with hidden layers on sim:0 shows device time per layer and a sim:0 stream track with copies") {
  TempDir dir;
  dir.write("sim.json", R"({"name": "digits_mlp", "input_shape": [64], "layers": [
    {"type": "Dense", "units": 128, "activation": "relu", "device": "sim:0"},
    {"type": "Dense", "units": 64, "activation": "relu", "device": "sim:0"},
    {"type": "Dropout", "rate": 0.1},
    {"type": "Dense", "units": 10, "activation": "softmax"}]})");
  CommandResult r =
      run_tensorctl("profile sim.json --iterations 2 --warmup 1 --batch-size 16 --ops --trace trace.json", dir.path());
  check_no_crash(r);
  REQUIRE(r.status == 0);
  for (const char* needle : {"device ms [min-max]", "\nsim:0 stream busy ", "x/copy_to_sim:0", "forward ms"})
    CHECK_MESSAGE(r.out.find(needle) != std::string::npos, needle);

  // Each sim:0 node shows twice: its launch on an executor thread, its work on the sim:0 stream track.
  const auto trace = read_json(dir / "trace.json");
  int stream_tid = -1;
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "thread_name" && e.at("args").at("name") == "sim:0 stream")
      stream_tid = e.at("tid").get<int>();
  REQUIRE(stream_tid >= 0);
  std::map<std::string, std::set<int>> tids;
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "X") tids[e.at("name").get<std::string>()].insert(e.at("tid").get<int>());
  for (const char* name : {"dense/FusedMatMul", "x/copy_to_sim:0", "dense_1/FusedMatMul/copy_to_cpu",
                           "dropout/DropoutGrad/copy_to_sim:0", "optimizer/ApplyAdam"}) {
    CHECK_MESSAGE(tids[name].count(stream_tid) == 1, name);
    CHECK_MESSAGE(tids[name].size() == 2, name);
  }
  CHECK(tids["dense_2/FusedMatMul"].count(stream_tid) == 0);

  r = run_tensorctl("profile sim.json --iterations 2 --warmup 1 --batch-size 16 --json", dir.path());
  REQUIRE(r.status == 0);
  const auto run = parse_json(r.out).at("runs").at(0);
  REQUIRE(run.at("streams").size() == 1);
  CHECK(run.at("streams").at(0).at("device") == "sim:0");
  CHECK(run.at("streams").at(0).at("busy").at("median_ms").get<double>() > 0);
  for (const auto& l : run.at("layers")) {
    const double device_ms = l.at("device").at("median_ms").get<double>();
    if (l.at("name") == "dense") CHECK(device_ms > 0);
    if (l.at("name") == "dense_2") CHECK(device_ms == 0);
  }
}

TEST_CASE("the trace file loads as JSON, every event has its keys, and two inter-op threads give two tracks") {
  TempDir dir;
  CommandResult r = run_tensorctl("profile " + quoted(source_path("configs/digits_mlp.json")) +
                                      " --iterations 5 --warmup 1 --inter-op-threads 2 --trace trace.json",
                                  dir.path());
  REQUIRE(r.status == 0);
  auto trace = read_json(dir / "trace.json");
  std::set<int> tids;
  int complete = 0;
  for (const auto& e : trace.at("traceEvents")) {
    for (const char* key : {"name", "ph", "pid", "tid"}) CHECK(e.contains(key));
    if (e.at("ph") != "X") continue;
    ++complete;
    for (const char* key : {"ts", "dur", "args"}) CHECK(e.contains(key));
    tids.insert(e.at("tid").get<int>());
  }
  CHECK(complete > 10);
  // Which threads ran nodes in the last step depends on the schedule: the waiting caller also takes queued
  // nodes, and may take all of them before the worker wakes. Lanes per thread are checked deterministically
  // in tests/core/profiler_test.cpp and tests/models/nn/layers/parallel_test.cpp.
  CHECK(!tids.empty());
}

TEST_SUITE("bad input") {
  TEST_CASE("profile refuses bad modes, thread lists, counts and trace paths, writing nothing") {
    TempDir dir;
    const std::string config = quoted(source_path("configs/digits_mlp.json"));
    expect_user_error(dir, "profile " + config + " --mode warp",
                      {"--mode: unknown mode \"warp\" (known: traced, eager, both)"});
    expect_user_error(dir, "profile " + config + " --inter-op-threads 0",
                      {"--inter-op-threads: expected a comma-separated list"});
    expect_user_error(dir, "profile " + config + " --intra-op-threads 1,,2", {"--intra-op-threads"});
    expect_user_error(dir, "profile " + config + " --iterations 0", {"--iterations"});
    expect_user_error(dir, "profile " + config + " --trace missing/trace.json",
                      {"--trace: directory missing does not exist"});
  }
}

TEST_CASE("a Parallel of two Delay branches leaves events on two thread tracks with two inter-op threads") {
  TempDir dir;
  CommandResult r = run_tensorctl("profile " + quoted(source_path("configs/models/parallel_delay.json")) +
                                      " --iterations 1 --warmup 0 --inter-op-threads 2 --trace trace.json",
                                  dir.path());
  REQUIRE(r.status == 0);
  std::set<int> delay_tids;
  const auto trace = read_json(dir / "trace.json");
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph").get<std::string>() == "X" && e.at("args").at("op").get<std::string>() == "Delay")
      delay_tids.insert(e.at("tid").get<int>());
  // Two 50 ms nodes with no path between them: while one thread sleeps in the first, the other takes the
  // second from the queue.
  CHECK(delay_tids.size() == 2);
}

TEST_CASE("--mode both profiles eager and traced side by side; eager runs the Delay branches one after another") {
  TempDir dir;
  CommandResult r = run_tensorctl("profile " + quoted(source_path("configs/models/parallel_delay.json")) +
                                      " --iterations 1 --warmup 0 --inter-op-threads 2 --mode both --json",
                                  dir.path());
  REQUIRE(r.status == 0);
  const auto doc = parse_json(r.out);
  REQUIRE(doc.at("runs").size() == 2);
  CHECK(doc.at("runs").at(0).at("mode") == "traced");
  CHECK(doc.at("runs").at(1).at("mode") == "eager");
  for (const auto& run : doc.at("runs")) CHECK(run.at("unprofiled_step").at("median_ms").get<double>() > 0);

  r = run_tensorctl("profile " + quoted(source_path("configs/models/parallel_delay.json")) +
                        " --iterations 1 --warmup 0 --inter-op-threads 2 --mode eager --trace eager.json",
                    dir.path());
  REQUIRE(r.status == 0);
  CHECK(r.out.find("eager, inter-op 2") != std::string::npos);
  // Eager mode has no scheduler: both Delay nodes run on the calling thread, the second after the first.
  std::vector<std::pair<double, double>> delays;
  std::set<int> tids;
  const auto trace = read_json(dir / "eager.json");
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph").get<std::string>() != "X") continue;
    tids.insert(e.at("tid").get<int>());
    if (e.at("args").at("op").get<std::string>() == "Delay")
      delays.emplace_back(e.at("ts").get<double>(), e.at("ts").get<double>() + e.at("dur").get<double>());
  }
  CHECK(tids.size() == 1);
  REQUIRE(delays.size() == 2);
  CHECK(delays[1].first >= delays[0].second);
}
