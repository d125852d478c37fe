// tensorctl profile end to end: the per-layer table, the sweep, the trace file's schema, bad input.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <optional>
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
                             "forward ms", "backward ms", "GFLOP/s", "step ", "Thread sweep", "speed-up",
                             "input: gathering a batch ", "preparing the data (read, decode, split, scale) took"})
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
  // A host-only profile has no device times; random inputs, no input figures.
  CHECK_FALSE(run.contains("streams"));
  CHECK_FALSE(run.contains("input"));
  for (const auto& l : run.at("layers")) CHECK_FALSE(l.contains("device"));
}

TEST_CASE("profile runs a config's precision or --precision's, and says which") {
  TempDir dir;
  const std::string spec = quoted(source_path("configs/models/iris_mlp.json"));
  const std::string digits = nlohmann::json(source_path("configs/models/digits_mlp.json").string()).dump();
  const auto precision_of = [&](const std::string& args) {
    const CommandResult r = run_tensorctl("profile " + args + " --iterations 1 --warmup 0 --json", dir.path());
    REQUIRE(r.status == 0);
    return parse_json(r.out).at("precision").get<std::string>();
  };
  CHECK(precision_of(spec) == "float32");
  CHECK(precision_of(spec + " --precision mixed_bfloat16") == "mixed_bfloat16");
  // A config's own policy, and the flag over it, as `train --precision` overrides the key.
  dir.write("half.json", R"({"model": )" + digits +
                             R"(, "data": {"dataset": "digits"}, "precision": "mixed_float16", "epochs": 1})");
  CHECK(precision_of("half.json") == "mixed_float16");
  CHECK(precision_of("half.json --precision float32") == "float32");
  // The table's header names the policy, and the run's precision line says what the CPU makes of it.
  const CommandResult text =
      run_tensorctl("profile " + spec + " --precision mixed_float16 --iterations 1 --warmup 0", dir.path());
  REQUIRE(text.status == 0);
  CHECK(text.out.find("precision mixed_float16: cpu computes it in float32") != std::string::npos);
  CHECK(text.out.find(", intra-op 1, mixed_float16\n") != std::string::npos);
  CHECK(run_tensorctl("profile " + spec + " --iterations 1 --warmup 0", dir.path()).out.find("precision ") ==
        std::string::npos);
  // A conflict is the config key's error, as under train.
  dir.write("accumulate.json", R"({"model": )" + digits +
                                   R"(, "data": {"dataset": "digits"}, "optimizer": {"type": "sgd",
                                   "gradient_accumulation_steps": 2}})");
  expect_user_error(dir, "profile accumulate.json --precision mixed_float16",
                    {"accumulate.json: precision: mixed_float16's loss scaling skips a step whole"});
  expect_user_error(dir, "profile " + spec + " --precision float16", {"--precision", "float16"});
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
                           "dropout/DropoutGrad/copy_to_sim:0", "optimizer/FusedUpdate"}) {
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
  // The step's batch, gathered from the config's data before its kernels, on a track of its own.
  std::optional<int> input_track;
  double first_kernel = 1e300;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("args").at("name") == "input pipeline") input_track = e.at("tid").get<int>();
    if (e.at("ph") == "X" && e.at("cat") != "input") first_kernel = std::min(first_kernel, e.at("ts").get<double>());
  }
  REQUIRE(input_track.has_value());
  int gathers = 0;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X" || e.at("tid") != *input_track) continue;
    ++gathers;
    CHECK(e.at("name") == "gather batch");
    CHECK(e.at("ts").get<double>() + e.at("dur").get<double>() <= first_kernel + 1.0);
  }
  CHECK(gathers == 1);
  // Which threads ran nodes in the last step depends on the schedule: the waiting caller also takes queued
  // nodes, and may take all of them before the worker wakes. Lanes per thread are checked deterministically
  // in tests/core/profiler_test.cpp and tests/models/nn/layers/parallel_test.cpp.
  CHECK(!tids.empty());
}

TEST_CASE("a streamed config's window reader has a track of its own in the trace, its reads in order") {
  TempDir dir;
  std::filesystem::copy_file(source_path("configs/data/digits.csv"), dir / "digits.csv");
  dir.write("stream.json", R"({"model": )" +
                               nlohmann::json(source_path("configs/models/digits_mlp.json").string()).dump() +
                               R"(, "data": {"csv": "digits.csv", "stream": true, "shuffle_buffer": 256},
                               "batch_size": 32, "seed": 3})");
  // 256 rows a window, 8 batches: 60 steps (30 measured, 30 between them) read about 7 windows.
  CommandResult r =
      run_tensorctl("profile stream.json --iterations 30 --warmup 0 --trace trace.json --json", dir.path());
  INFO(r.err);
  REQUIRE(r.status == 0);
  const auto trace = read_json(dir / "trace.json");
  std::optional<int> reader;
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("args").at("name") == "window reader") reader = e.at("tid").get<int>();
  REQUIRE(reader.has_value());
  std::vector<std::string> reads;
  double last_end = -1;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    CHECK(e.at("ts").get<double>() >= 0);
    if (e.at("tid") != *reader) continue;
    reads.push_back(e.at("name").get<std::string>());
    CHECK(e.at("ts").get<double>() >= last_end);  // one thread: one read after another
    last_end = e.at("ts").get<double>() + e.at("dur").get<double>();
  }
  // 1,294 training rows in 6 windows, read round and round: window 1 follows window 0, and so on.
  REQUIRE(reads.size() >= 5);
  for (std::size_t i = 1; i < reads.size(); ++i) {
    const int before = std::stoi(reads[i - 1].substr(reads[i - 1].rfind(' ') + 1));
    CHECK(reads[i] == "read window " + std::to_string((before + 1) % 6));
  }
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
    // Every measured step keeps its times: --iterations 1000000000000 grew by about 0.8 KB a step (the digits
    // MLP) until memory ran out. Past 2^63 the step count wrapped, no step ran, and a table of zeros and nan
    // came out with exit 0. The bad --mode, refused only after the flags are read, makes a missing bound fail
    // at once instead of running the steps.
    for (const char* count : {"1000001", "1000000000000", "9223372036854775807"}) {
      expect_user_error(dir, "profile " + config + " --iterations " + count + " --mode warp",
                        {std::string("--iterations: expected an integer in 1..1000000, got ") + count});
      expect_user_error(dir, "profile " + config + " --warmup " + count + " --iterations 1 --mode warp",
                        {std::string("--warmup: expected an integer in 0..1000000, got ") + count});
    }
    expect_user_error(dir, "profile " + config + " --trace missing/trace.json",
                      {"--trace: directory missing does not exist"});
    expect_user_error(dir, "profile " + config + " --iterations 1 --trace - --json",
                      {"--trace: --trace - and --json both write to standard output"});
  }
}

TEST_CASE("profile of mirrored replicas counts the FLOPs of the rows the profiled replica runs, as it times them") {
  TempDir dir;
  nlohmann::json config = read_json(source_path("configs/digits_mlp.json"));
  config["model"] = source_path("configs/models/digits_mlp.json").string();
  config["data"] = "digits";
  dir.write("one.json", config.dump());
  config["strategy"] = {{"type", "mirrored"}, {"replicas", 2}};
  dir.write("two.json", config.dump());
  auto dense_flops = [&](const std::string& file) {
    const CommandResult r = run_tensorctl("profile " + file + " --iterations 1 --warmup 0 --json", dir.path());
    REQUIRE(r.status == 0);
    const nlohmann::json report = parse_json(r.out);
    for (const auto& l : report.at("runs")[0].at("layers"))
      if (l.at("name") == "dense") return l.at("flops").get<double>();
    FAIL("no dense row");
    return 0.0;
  };
  // Batch 32 split between two replicas: the first runs 16 rows, half the FLOPs of one replica's 32.
  CHECK(dense_flops("one.json") == 2 * dense_flops("two.json"));
}

TEST_CASE("profile --trace - writes the trace alone on stdout, as one JSON document, and the table on stderr") {
  TempDir dir;
  const CommandResult r = run_tensorctl(
      "profile " + quoted(source_path("configs/digits_mlp.json")) + " --iterations 2 --warmup 0 --trace -", dir.path());
  REQUIRE(r.status == 0);
  CHECK(parse_json(r.out).at("traceEvents").size() > 0);
  CHECK(r.err.find("Profile of ") != std::string::npos);
  CHECK(r.err.find("trace of the last configuration written to standard output") != std::string::npos);
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

TEST_CASE(
    "a model spec that no default loss fits profiles forward only; --loss profiles training; --forward-only builds no "
    "loss") {
  TempDir dir;
  // Its (None, 4, 4) output fits no cross-entropy: before, every profile of it failed on the loss.
  dir.write("grid.json", R"({"input_shape": [16], "layers": [
    {"type": "Dense", "units": 16}, {"type": "Reshape", "target_shape": [4, 4]}]})");
  CommandResult r = run_tensorctl("profile grid.json --iterations 2 --warmup 1", dir.path());
  REQUIRE(r.status == 0);
  CHECK(r.out.find("forward only (the default loss does not fit this model's output; --loss NAME profiles training)") !=
        std::string::npos);
  CHECK(r.out.find("backward ms") == std::string::npos);  // no backward column without a backward pass

  auto layer_names = [](const nlohmann::json& doc) {
    std::set<std::string> names;
    for (const auto& l : doc.at("runs").at(0).at("layers")) names.insert(l.at("name").get<std::string>());
    return names;
  };
  for (const char* flags : {"", " --forward-only"}) {
    const auto doc =
        parse_json(run_tensorctl(std::string("profile grid.json --iterations 2 --json") + flags, dir.path()).out);
    CHECK(doc.at("forward_only").get<bool>());
    CHECK(doc.at("loss").is_null());
    CHECK(layer_names(doc) == std::set<std::string>{"dense", "reshape"});
  }
  const auto trained = parse_json(run_tensorctl("profile grid.json --iterations 2 --json --loss mse", dir.path()).out);
  CHECK_FALSE(trained.at("forward_only").get<bool>());
  CHECK(trained.at("loss") == "mse");
  CHECK(layer_names(trained) == std::set<std::string>{"dense", "reshape", "loss", "optimizer"});

  // A spec the default fits is still profiled training, as before.
  const auto iris = parse_json(
      run_tensorctl("profile " + quoted(source_path("configs/models/iris_mlp.json")) + " --iterations 2 --json",
                    dir.path())
          .out);
  CHECK_FALSE(iris.at("forward_only").get<bool>());
  CHECK(iris.at("loss") == "sparse_categorical_crossentropy");
  expect_user_error(dir, "profile grid.json --loss hinge", {"--loss: unknown loss \"hinge\"", "known: "});
}

TEST_CASE("Conv2D and pooling layers get FLOP figures: 2 per multiply-add, 1 per element a pooling window covers") {
  TempDir dir;
  auto flops = [&](const std::string& flags) {
    const auto doc = parse_json(run_tensorctl("profile " + quoted(source_path("configs/models/digits_cnn.json")) +
                                                  " --batch-size 4 --iterations 1 --warmup 0 --json" + flags,
                                              dir.path())
                                    .out);
    std::map<std::string, double> out;
    for (const auto& l : doc.at("runs").at(0).at("layers")) out[l.at("name")] = l.at("flops").get<double>();
    return out;
  };
  // digits_cnn at batch 4: conv 3x3 1->16 on 8x8 (same), pool 2 -> 4x4, conv 3x3 16->32, pool 2 -> 2x2,
  // dense 128->64, dense 64->10.
  const double conv = 2.0 * 4 * 8 * 8 * 16 * (3 * 3 * 1);
  const double conv_1 = 2.0 * 4 * 4 * 4 * 32 * (3 * 3 * 16);
  const double pool = 4.0 * 4 * 4 * 16 * (2 * 2);
  const double pool_1 = 4.0 * 2 * 2 * 32 * (2 * 2);
  const auto forward = flops(" --forward-only");
  CHECK(forward.at("conv2d") == conv);
  CHECK(forward.at("max_pooling2d") == pool);
  CHECK(forward.at("conv2d_1") == conv_1);
  CHECK(forward.at("max_pooling2d_1") == pool_1);
  CHECK(forward.at("flatten") == 0);
  CHECK(forward.at("dense") == 2.0 * 4 * 128 * 64);
  // Training: the kernel gradient costs what the forward product does, and so does the input gradient,
  // which the first layer does not need; a pooling gradient visits each window once more.
  const auto step = flops("");
  CHECK(step.at("conv2d") == 2 * conv);
  CHECK(step.at("conv2d_1") == 3 * conv_1);
  CHECK(step.at("max_pooling2d") == 2 * pool);
  CHECK(step.at("dense") == 3 * 2.0 * 4 * 128 * 64);
}

TEST_CASE("with COLUMNS set the profile table fits it and names what it left out; piped output keeps every column") {
  TempDir dir;
  const std::string args =
      "profile " + quoted(source_path("configs/digits_cnn.json")) + " --iterations 2 --warmup 1 --ops";
  CommandResult wide = run_tensorctl(args, dir.path());
  REQUIRE(wide.status == 0);
  CHECK(widest_table_line(wide.out) > 120);
  CHECK(wide.out.find("left out") == std::string::npos);
  for (int columns : {120, 80, 60}) {
    ScopedEnv env("COLUMNS", std::to_string(columns));
    CommandResult r = run_tensorctl(args, dir.path());
    REQUIRE(r.status == 0);
    CHECK(widest_table_line(r.out) <= static_cast<std::size_t>(columns));
    CHECK(r.out.find("│   conv2d_1/Fused") != std::string::npos);  // narrow: the op names cut, with "…"
    CHECK(r.out.find("left out to fit " + std::to_string(columns) + " columns; --json has every figure") !=
          std::string::npos);
  }
}

TEST_CASE("a profile sweep shows its progress on a terminal, and nothing on stderr when piped") {
  TempDir dir;
  const std::string args = "profile " + quoted(source_path("configs/models/iris_mlp.json")) +
                           " --iterations 2 --warmup 0 --inter-op-threads 1,2";
  const std::optional<CommandResult> tty = run_piped_and_on_terminal(args, dir.path());
  if (!tty) return;
  CHECK(tty->out.find("\r[1/2] profiling traced, inter-op 1, intra-op 1, 0s elapsed\x1b[K") != std::string::npos);
  CHECK(tty->out.find("\r[2/2] profiling traced, inter-op 2, intra-op 1") != std::string::npos);
  CHECK(tty->out.find("\r\x1b[K") != std::string::npos);  // cleared before the tables
  CHECK(tty->out.find("Thread sweep") != std::string::npos);
}

TEST_CASE("under a CPU-time limit: the profile of a stack of 100,000 layers takes seconds, not minutes") {
  TempDir dir;
  // Each row of the table searched every layer and every graph node, and --ops every op: 20,000 layers took
  // 6.6 s and 100,000 minutes, where train takes seconds. The cap counts CPU time, over ten times what the
  // profile takes, so a busy machine does not reach it; a quadratic pass does.
  std::string layers;
  for (int i = 0; i < 100000; ++i) layers += R"({"type": "Activation", "activation": "relu"}, )";
  dir.write("long.json", R"({"input_shape": [8], "layers": [)" + layers + R"({"type": "Dense", "units": 4}]})");
  const CommandResult r = run_shell_command(
      "ulimit -t 60; exec " + quoted(TENSORCTL_BINARY) + " profile long.json --iterations 1 --warmup 0 --ops",
      dir.path());
  REQUIRE(r.status == 0);
  for (const char* needle :
       {"activation_99999 (Activation)", "  activation_99999/Relu", "dense (Dense)", "  dense/MatMul"})
    CHECK_MESSAGE(r.out.find(needle) != std::string::npos, needle);
}
