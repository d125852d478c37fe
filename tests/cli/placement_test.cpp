// Device placement end to end, on the simulated device sim:N that every machine has: a digits MLP whose
// hidden layers run on sim:0 trains to the CPU's weights bit for bit, the copies between devices show in
// --log-device-placement, and a layer sim cannot run falls back to the CPU with a warning, or is refused
// under --strict-placement.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>

#include "cli/cli_test_util.h"
#include "core/compute_type.h"
#include "models/scoped_env.h"

using namespace tctl::cli_test;

namespace {

// The digits MLP of configs/models/digits_mlp.json with the two hidden layers on `hidden_device` and
// `activation` in the first.
std::string digits_spec(const std::string& hidden_device, const std::string& activation = "relu") {
  return R"({"name": "digits_mlp", "input_shape": [64], "layers": [
    {"type": "Dense", "units": 128, "activation": ")" +
         activation + R"(", "device": ")" + hidden_device + R"("},
    {"type": "Dense", "units": 64, "activation": "relu", "device": ")" +
         hidden_device + R"("},
    {"type": "Dropout", "rate": 0.1},
    {"type": "Dense", "units": 10, "activation": "softmax"}]})";
}

std::string digits_config(const std::string& spec_file) {
  return R"({"model": ")" + spec_file + R"(", "data": {"dataset": "digits", "test_split": 0.2, "validation_split": 0.1,
    "shuffle": true, "standardize": true}, "loss": "sparse_categorical_crossentropy",
    "optimizer": {"type": "adam", "learning_rate": 0.001}, "metrics": ["accuracy"], "epochs": 2, "batch_size": 32,
    "seed": 42})";
}

const std::string kOneThread = " --inter-op-threads 1 --intra-op-threads 1 --quiet";

}  // namespace

TEST_CASE(
    "a digits MLP with its hidden layers on sim:0 trains to the CPU's weights, bit for bit, with its copies logged") {
  TempDir dir;
  dir.write("cpu.json", digits_spec("cpu"));
  dir.write("sim.json", digits_spec("sim:0"));
  dir.write("train_cpu.json", digits_config("cpu.json"));
  dir.write("train_sim.json", digits_config("sim.json"));
  const CommandResult cpu = run_tensorctl("train train_cpu.json --output cpu" + kOneThread, dir.path());
  REQUIRE(cpu.status == 0);
  const CommandResult sim =
      run_tensorctl("train train_sim.json --output sim --log-device-placement" + kOneThread, dir.path());
  check_no_crash(sim);
  REQUIRE(sim.status == 0);
  CHECK(read_text(dir / "sim/weights.safetensors") == read_text(dir / "cpu/weights.safetensors"));
  // The batch goes to sim:0 once, the second hidden layer's output comes back for Dropout, and the gradient
  // goes back to sim:0 for the hidden layers' backward pass and their Adam updates, one FusedUpdate for the
  // four variables there (the output layer's two stay on the CPU, an update each).
  for (const char* line :
       {"placement: x/copy_to_sim:0 (Copy): sim:0", "placement: dense/FusedMatMul (FusedMatMul): sim:0",
        "placement: dense_1/FusedMatMul/copy_to_cpu (Copy): cpu",
        "placement: dropout/DropoutGrad/copy_to_sim:0 (Copy): sim:0",
        "placement: optimizer/FusedUpdate (FusedUpdate): sim:0", "placement: optimizer/ApplyAdam (ApplyAdam): cpu",
        "placement: dense_2/FusedMatMul (FusedMatMul): cpu"})
    CHECK_MESSAGE(sim.err.find(line) != std::string::npos, line);
  CHECK(sim.err.find("warning") == std::string::npos);
  // Accuracy reads the logits, so neither the training step nor evaluation computes the output's softmax.
  CHECK(sim.err.find("(Softmax)") == std::string::npos);
  // Once per graph (training, inference), though every batch size prepares a plan of its own.
  std::size_t copies = 0;
  for (std::size_t at = 0; (at = sim.err.find("placement: x/copy_to_sim:0 (Copy)", at)) != std::string::npos; ++at)
    ++copies;
  CHECK(copies == 2);
  // The run's summary gives the memory of the device it used besides the CPU (the CPU-only run lists none).
  const nlohmann::json devices = read_json(dir / "sim/summary.json").at("devices");
  REQUIRE(devices.size() == 1);
  CHECK(devices[0].at("name") == "sim:0");
  CHECK(devices[0].at("peak_bytes").get<double>() > 0);
  CHECK(devices[0].at("fresh_blocks").get<double>() > 0);
  CHECK(devices[0].at("reserved_bytes").get<double>() >= devices[0].at("peak_bytes").get<double>());
  CHECK(read_json(dir / "cpu/summary.json").at("devices").empty());
  CHECK(sim.err.find("device graph:") == std::string::npos);  // off by default
}

namespace {
// The config digits_config makes, with "device_graphs": true.
std::string with_graphs(std::string config) {
  config.insert(config.rfind('}'), R"(, "device_graphs": true)");
  return config;
}
}  // namespace

TEST_CASE(
    "\"device_graphs\": true replays sim's part of each step, to the same weights; a value not a boolean is refused") {
  TempDir dir;
  dir.write("sim.json", digits_spec("sim:0"));
  dir.write("eager.json", digits_config("sim.json"));
  dir.write("graphs.json", with_graphs(digits_config("sim.json")));
  const CommandResult graphs =
      run_tensorctl("train graphs.json --output graphs --log-device-placement" + kOneThread, dir.path());
  const CommandResult plain =
      run_tensorctl("train eager.json --output eager --log-device-placement" + kOneThread, dir.path());
  check_no_crash(graphs);
  REQUIRE(graphs.status == 0);
  REQUIRE(plain.status == 0);
  // sim records its part of each step and replays it (core/device_graph.h): the forward pass up to Dropout on
  // the CPU, then the backward pass and the updates; none is left eager.
  for (const char* line : {"placement: device graph: sim:0 segment 0 (level 0, 9 nodes): recorded",
                           "placement: device graph: sim:0 segment 1 (level 1, 9 nodes): recorded"})
    CHECK_MESSAGE(graphs.err.find(line) != std::string::npos, line);
  CHECK(graphs.err.find("runs eagerly") == std::string::npos);
  CHECK(plain.err.find("device graph:") == std::string::npos);
  CHECK(read_text(dir / "graphs/weights.safetensors") == read_text(dir / "eager/weights.safetensors"));
  // The summary's config says so where it is not the default.
  CHECK(read_json(dir / "graphs/summary.json").at("config").at("device_graphs") == true);
  CHECK(!read_json(dir / "eager/summary.json").at("config").contains("device_graphs"));
  std::string wrong = digits_config("sim.json");
  wrong.insert(wrong.rfind('}'), R"(, "device_graphs": "yes")");
  dir.write("wrong.json", wrong);
  expect_user_error(dir, "train wrong.json --output wrong" + kOneThread, {"wrong.json", "device_graphs"});
}

TEST_CASE("dropout on sim:0 inside a replayed segment draws each step's numbers, training the eager run's weights") {
  // A replay runs the kernels recorded in the first step; Replay::launch gives them the run's step, whose key
  // dropout draws with. With the recorded step instead, every step would drop the same units.
  std::string spec = digits_spec("sim:0");
  spec.replace(spec.find(R"({"type": "Dropout", "rate": 0.1})"), 32,
               R"({"type": "Dropout", "rate": 0.1, "device": "sim:0"})");
  TempDir dir;
  dir.write("sim.json", spec);
  dir.write("eager.json", digits_config("sim.json"));
  dir.write("graphs.json", with_graphs(digits_config("sim.json")));
  const CommandResult graphs =
      run_tensorctl("train graphs.json --output graphs --log-device-placement" + kOneThread, dir.path());
  const CommandResult plain = run_tensorctl("train eager.json --output eager" + kOneThread, dir.path());
  check_no_crash(graphs);
  REQUIRE(graphs.status == 0);
  REQUIRE(plain.status == 0);
  INFO(graphs.err);
  CHECK(graphs.err.find("placement: dropout/Dropout (Dropout): sim:0") != std::string::npos);
  CHECK(graphs.err.find("placement: dropout/DropoutGrad (DropoutGrad): sim:0") != std::string::npos);
  CHECK(graphs.err.find("): recorded") != std::string::npos);
  CHECK(graphs.err.find("runs eagerly") == std::string::npos);
  CHECK(read_text(dir / "graphs/weights.safetensors") == read_text(dir / "eager/weights.safetensors"));
}

// Dynamic loss scaling (mixed_float16) scales the hidden layers' gradients back where they were made: AllFinite
// and MulScalar run on sim:0 too, so --strict-placement accepts the model. sim's products read float16
// operands, so the weights are not the float32 run's, but the accuracy is.
TEST_CASE("mixed_float16 with the hidden layers on sim:0: loss scaling runs there, under --strict-placement") {
  TempDir dir;
  dir.write("cpu.json", digits_spec("cpu"));
  dir.write("sim.json", digits_spec("sim:0"));
  dir.write("train_cpu.json", digits_config("cpu.json"));
  dir.write("train_sim.json", with_graphs(digits_config("sim.json")));
  REQUIRE(run_tensorctl("train train_cpu.json --output cpu" + kOneThread, dir.path()).status == 0);
  const CommandResult sim = run_tensorctl(
      "train train_sim.json --output sim --precision mixed_float16 --strict-placement --log-device-placement" +
          kOneThread,
      dir.path());
  check_no_crash(sim);
  REQUIRE(sim.status == 0);
  const nlohmann::json mixed = read_json(dir / "sim/summary.json"), plain = read_json(dir / "cpu/summary.json");
  CHECK(mixed["train"]["skipped_steps"] == 0.0);
  CHECK(std::abs(mixed["test"]["accuracy"].get<double>() - plain["test"]["accuracy"].get<double>()) <= 0.01);
  // Each device checks its own gradients: one AllFinite on sim:0, one on the CPU for the output layer's, and
  // no gradient copied for it (the verdicts meet on the CPU).
  for (const char* line : {"optimizer/AllFinite (AllFinite): sim:0", "optimizer/AllFinite_1 (AllFinite): cpu",
                           "optimizer/AllFinite/copy_to_cpu (Copy): cpu", "(MulScalar): sim:0", "(MulScalar): cpu",
                           "(LossScaleFactor): cpu", "(UpdateLossScale): cpu"})
    CHECK_MESSAGE(sim.err.find(line) != std::string::npos, line);
  CHECK(sim.err.find("optimizer/AllFinite_1/copy") == std::string::npos);
  // Three segments a step on sim:0, all replayed: the updates wait for the CPU's verdict on every gradient.
  CHECK(sim.err.find("device graph: sim:0 segment 2 (level 2,") != std::string::npos);
  CHECK(sim.err.find("runs eagerly") == std::string::npos);
}

TEST_CASE(
    "an op sim has no kernel for runs on the CPU with a warning naming it; --strict-placement refuses it, exit 2") {
  TempDir dir;
  dir.write("tanh.json", digits_spec("sim:0", "tanh"));
  dir.write("train.json", digits_config("tanh.json"));
  const CommandResult soft = run_tensorctl("train train.json --output soft" + kOneThread, dir.path());
  check_no_crash(soft);
  CHECK(soft.status == 0);
  CHECK(soft.err.find("warning: dense/Tanh: op Tanh has no kernel for sim:0, running on cpu") != std::string::npos);
  expect_user_error(dir, "train train.json --output strict --strict-placement" + kOneThread,
                    {"cannot place dense/Tanh", "no kernel for sim:0", "--strict-placement"});
}

TEST_CASE("a device name tensorctl does not know is refused where it is written") {
  TempDir dir;
  dir.write("tpu.json", digits_spec("tpu:0"));
  dir.write("train.json", digits_config("tpu.json"));
  expect_user_error(dir, "train train.json --output run", {"tpu.json", "layers[0].device", "unknown device", "sim:N"});
  expect_user_error(dir, "train train.json --output run --device sim:x", {"--device", "unknown device \"sim:x\""});
}

// "sim:01" was taken and named a device apart from sim:1; "" passed --strict-placement as no device at all.
TEST_CASE("a device index with leading zeros, a sign or spaces, and an empty device, are refused where written") {
  TempDir dir;
  const std::string index_rule = "an index is written as plain digits, without leading zeros, a sign or spaces";
  dir.write("zero.json", digits_spec("sim:01"));
  dir.write("train.json", digits_config("zero.json"));
  expect_user_error(dir, "train train.json --output run --strict-placement",
                    {"zero.json: layers[0].device: device \"sim:01\": " + index_rule});
  dir.write("empty.json", digits_spec(""));
  dir.write("train.json", digits_config("empty.json"));
  expect_user_error(dir, "train train.json --output run --strict-placement",
                    {"empty.json: layers[0].device: expected a device name", "got an empty string"});
  dir.write("sim.json", digits_spec("sim:1"));
  dir.write("train.json", digits_config("sim.json"));
  for (const std::string flag : {"cuda:00", "cpu:00", "sim:+1", "'sim: 1'"})
    expect_user_error(dir, "train train.json --output run --device " + flag, {"--device: device ", index_rule});
  nlohmann::json config = parse_json(digits_config("sim.json"));
  config["device"] = "cuda:01";
  dir.write("train.json", config.dump());
  expect_user_error(dir, "train train.json --output run", {"train.json: device: device \"cuda:01\": " + index_rule});
  config["device"] = "cpu";
  config["strategy"] = {{"type", "mirrored"}, {"replicas", 2}, {"devices", {"sim:0", "sim:01"}}};
  dir.write("train.json", config.dump());
  expect_user_error(dir, "train train.json --output run",
                    {"train.json: strategy.devices[1]: device \"sim:01\": " + index_rule});
}

TEST_CASE("tensorctl devices lists the CPU, the simulated devices, and CUDA's devices or why there are none") {
  TempDir dir;
  const CommandResult text = run_tensorctl("devices", dir.path());
  REQUIRE(text.status == 0);
  CHECK(text.out.rfind("cpu      processor ", 0) == 0);
  CHECK(text.out.find(", cores ") != std::string::npos);
  CHECK(text.out.find(", blas ") != std::string::npos);
  CHECK(text.out.find("\nsim:0    simulated ") != std::string::npos);
  CHECK(text.out.find("\nsim:1    simulated ") != std::string::npos);
  // Either a GPU line or the reason there is none; a build without CUDA says so too.
  CHECK((text.out.find("\ncuda:0   gpu ") != std::string::npos ||
         text.out.find("\ncuda     none: ") != std::string::npos));

  const CommandResult json = run_tensorctl("devices --json", dir.path());
  REQUIRE(json.status == 0);
  const auto doc = nlohmann::json::parse(json.out);
  REQUIRE(doc.at("devices").size() >= 3);
  CHECK(doc["devices"][0]["name"] == "cpu");
  CHECK(doc["devices"][0].contains("simd"));
  // Whether mixed_bfloat16's products run in bfloat16 here, as the run's precision line decides it.
  CHECK((doc["devices"][0]["bf16 products"] == "yes") == tctl::cpu_bf16_products());
  if (tctl::cpu_bf16_products()) {
    const tctl::testing::ScopedEnv keep_float32("TCTL_CPU_BF16", "0");
    const CommandResult off = run_tensorctl("devices", dir.path());
    CHECK(off.out.find(", bf16 products no (TCTL_CPU_BF16=0),") != std::string::npos);
  }
  CHECK(doc["devices"][1]["name"] == "sim:0");
  for (const auto& d : doc["devices"])
    if (d["name"].get<std::string>().rfind("cuda:", 0) == 0) CHECK(d.contains("compute capability"));
}

TEST_CASE("a variable that does not fit on its device is one line naming the variable, exit 1") {
  // On an H100 held full by another process, the message named only the bytes (the 1 GiB kernel of a Dense
  // 16384 after another), not whose they were.
  TempDir dir;
  dir.write("sim.json", digits_spec("sim:0"));
  dir.write("train.json", digits_config("sim.json"));
  setenv("TCTL_SIM_MEMORY_LIMIT", "10000", 1);  // less than the first kernel, 64 x 128 floats
  const CommandResult r = run_tensorctl("train train.json --output run --epochs 1" + kOneThread, dir.path());
  unsetenv("TCTL_SIM_MEMORY_LIMIT");
  check_runtime_error(r, {"variable dense/kernel [64, 128]: sim:0: out of memory allocating 32768 bytes"});
}

TEST_CASE("a device out of memory is one line naming the node, exit 1, and the checkpoint before it stays whole") {
  TempDir dir;
  dir.write("sim.json", digits_spec("sim:0"));
  std::string config = digits_config("sim.json");
  config.replace(config.find("\"batch_size\": 32"), 16, "\"batch_size\": 1024");
  dir.write("train.json", config);
  REQUIRE(run_tensorctl("train train.json --output run --epochs 1" + kOneThread, dir.path()).status == 0);
  const std::string checkpoint = read_text(dir / "run/checkpoint.safetensors");
  // Room for the weights and Adam's slots on sim:0 (about 200 KB), not for a batch of 1024 rows' activations.
  setenv("TCTL_SIM_MEMORY_LIMIT", "1000000", 1);
  const CommandResult r = run_tensorctl("train train.json --resume run --epochs 2" + kOneThread, dir.path());
  unsetenv("TCTL_SIM_MEMORY_LIMIT");
  check_runtime_error(r, {"(FusedMatMul): output [1024, ", "sim:0: out of memory allocating"});
  CHECK(read_text(dir / "run/checkpoint.safetensors") == checkpoint);
}
