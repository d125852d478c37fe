// Hostile specs and configs, as an adversary would write them: overflowing shapes, models too large for
// memory, nesting thousands of levels deep, numbers past a double, repeated keys. Each is one line, exit 2,
// nothing written; none is a signal, an abort or minutes of work.
#include <sys/stat.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "cli/cli_test_util.h"

namespace tctl::cli_test {
namespace {

const char* kHugeShape =
    R"({"input_shape": [4294967296, 4294967296], "layers": [{"type": "Flatten"}, {"type": "Dense", "units": 2}]})";

// A train config of iris around `model` (a spec object's text).
std::string iris_config(const std::string& model) {
  return R"({"model": )" + model + R"(, "data": {"dataset": "iris"}, "epochs": 1, "output": "run"})";
}

// Parallel layers nested `levels` deep around a Dense.
std::string nested_parallel(int levels) {
  std::string layer = R"({"type": "Dense", "units": 2})";
  for (int i = 0; i < levels; ++i)
    layer =
        R"({"type": "Parallel", "merge": "add", "branches": [[)" + layer + R"(], [{"type": "Dense", "units": 2}]]})";
  return R"({"input_shape": [4], "layers": [)" + layer + "]}";
}

TEST_CASE("a shape whose element count overflows 64 bits is refused by summary, train, profile and import-keras") {
  TempDir dir;
  dir.write("huge.json", kHugeShape);
  dir.write("config.json", iris_config(kHugeShape));
  expect_user_error(dir, "summary huge.json", {"huge.json: input_shape:", "about 1.84e+19 elements per example"});
  expect_user_error(dir, "train config.json --quiet", {"config.json: model.input_shape:", "about 1.84e+19"});
  expect_user_error(dir, "profile huge.json --iterations 1", {"huge.json: input_shape:", "about 1.84e+19"});
  dir.write("keras.json", R"({"class_name": "Sequential", "config": {"name": "huge", "layers": [
      {"class_name": "InputLayer", "config": {"batch_input_shape": [null, 4294967296, 4294967296], "dtype": "float32", "name": "in"}},
      {"class_name": "Flatten", "config": {"name": "flat"}},
      {"class_name": "Dense", "config": {"name": "d", "units": 2, "activation": "linear", "use_bias": true,
        "kernel_initializer": {"class_name": "GlorotUniform", "config": {"seed": null}},
        "bias_initializer": {"class_name": "Zeros", "config": {}}}}]}, "keras_version": "2.15.0", "backend": "tensorflow"})");
  expect_user_error(dir, "import-keras keras.json -o spec.json",
                    {"keras.json: the converted spec's input_shape:", "about 1.84e+19"});
}

TEST_CASE("a model too large for memory is refused before anything is allocated, saying what it needs") {
  TempDir dir;
  // 40 layers of 32768 x 32768 weights: 160 GB, past any machine that runs these tests.
  std::string layers;
  for (int i = 0; i < 40; ++i) layers += R"({"type": "Dense", "units": 32768, "use_bias": false}, )";
  dir.write("big.json", R"({"input_shape": [32768], "layers": [)" + layers + R"({"type": "Dense", "units": 2}]})");
  expect_user_error(dir, "summary big.json",
                    {"big.json: layers[", "the model's weights need 160.00 GB, more than the memory limit"});
  // Small weights, but a batch no machine holds.
  dir.write("config.json", iris_config(R"({"input_shape": [4], "layers": [{"type": "Dense", "units": 3}]})"));
  expect_user_error(dir, "train config.json --quiet --batch-size 1000000000000",
                    {"config.json: batch_size:", "training needs about", "for a batch of 1000000000000"});
}

TEST_CASE("a Parallel's branches count in training's memory: 16 branches hold 16 tensors, not one") {
  TempDir dir;
  // Each of the 16 branches holds its 1024 features per example and their gradient: 36 MB at batch 256.
  // Counted once, as the Parallel's output, they came to 4 MB and the run went ahead; at 262144 features
  // the estimate was 1.29 GB and the process grew past 7 GB.
  std::string branches;
  for (int i = 0; i < 16; ++i)
    branches += std::string(i ? ", " : "") + R"([{"type": "Activation", "activation": "gelu"}])";
  dir.write("config.json", iris_config(R"({"input_shape": [4], "layers": [{"type": "Dense", "units": 1024},
      {"type": "Parallel", "merge": "add", "branches": [)" +
                                       branches + R"(]}, {"type": "Dense", "units": 3}]})"));
  ScopedEnv limit("TENSORCTL_MEMORY_LIMIT", "20M");
  expect_user_error(dir, "train config.json --quiet --batch-size 256",
                    {"config.json: batch_size: training needs about 36.13 MB (128.05 KB for weights, gradients and "
                     "optimizer slots, 36.01 MB for a batch of 256), more than the memory limit of 20.00 MB"});
}

TEST_CASE("a TENSORCTL_MEMORY_LIMIT that is not a limit is one line naming it, exit 2, nothing written") {
  TempDir dir;
  dir.write("config.json", iris_config(R"({"input_shape": [4], "layers": [{"type": "Dense", "units": 3}]})"));
  // Each used to fall back to the machine's memory without a word; 1G and 100 worked.
  for (const char* value : {"1.5G", "1GB", "1 G", "1e3", "0", "abc"}) {
    ScopedEnv limit("TENSORCTL_MEMORY_LIMIT", value);
    const std::string expected = std::string(
                                     "error: TENSORCTL_MEMORY_LIMIT: expected a whole number of bytes from 1 to 2^62, "
                                     "or one with a K, M, G or T suffix (powers of 1024, either case: 512M, "
                                     "8g), got \"") +
                                 value + "\"";
    expect_user_error(dir, "train config.json --quiet", {expected});
    expect_user_error(dir, "summary config.json", {expected});
    expect_user_error(dir, "profile config.json --iterations 1 --warmup 0", {expected});
  }
  ScopedEnv limit("TENSORCTL_MEMORY_LIMIT", "1g");
  CHECK(run_tensorctl("summary config.json", dir.path()).status == 0);
}

TEST_CASE("nesting thousands of levels deep is one clear error, not minutes, gigabytes or a stack overflow") {
  TempDir dir;
  dir.write("deep.json", nested_parallel(3000));  // about 200 KB
  expect_user_error(dir, "summary deep.json",
                    {"deep.json: layers[0].branches[0][0].branches", "nested deeper than 128 levels"});
  std::string brackets(100000, '[');
  dir.write("brackets.json", brackets + std::string(100000, ']'));
  expect_user_error(dir, "summary brackets.json", {"brackets.json: [0][0][0]", "nested deeper than 128 levels"});
  // As deep as a real model ever goes, and far beyond, still builds.
  dir.write("ok.json", nested_parallel(30));
  CommandResult r = run_tensorctl("summary ok.json", dir.path());
  CHECK(r.status == 0);
}

TEST_CASE("numbers past a double, repeated keys and an empty output name the file and the place") {
  TempDir dir;
  dir.write("lr.json",
            R"({"model": {"input_shape": [4], "layers": [{"type": "Dense", "units": 3}]}, "data": {"dataset": "iris"},
                           "optimizer": {"type": "adam", "learning_rate": 1e400}})");
  expect_user_error(dir, "train lr.json --quiet",
                    {"lr.json: optimizer.learning_rate:", "number 1e400 is out of range"});
  dir.write("dup.json", R"({"input_shape": [4], "layers": [{"type": "Dense", "units": 3, "units": 30}]})");
  expect_user_error(dir, "summary dup.json", {"dup.json: layers[0].units:", "duplicate key \"units\""});
  dir.write(
      "out.json",
      R"({"model": {"input_shape": [4], "layers": [{"type": "Dense", "units": 3}]}, "data": {"dataset": "iris"}, "output": ""})");
  expect_user_error(dir, "train out.json --quiet", {"out.json: output:", "empty string"});
  dir.write("ok.json", iris_config(R"({"input_shape": [4], "layers": [{"type": "Dense", "units": 3}]})"));
  expect_user_error(dir, "train ok.json --quiet --output ''", {"--output", "empty string"});
  // Where the flag's absence means standard output or no file, an empty name is not taken for it.
  expect_user_error(dir, "profile " + quoted(source_path("configs/models/iris_mlp.json")) + " --trace ''",
                    {"--trace: expected a file name or - for standard output, got an empty string"});
  expect_user_error(dir, "import-keras ok.json -o ''", {"--output: expected a file name"});
  expect_user_error(dir, "predict --run run --input x.csv --output ''", {"--output: expected a file name"});
  // Nor where the flag's absence means the default weights, the whole race-check suite or the config's loss.
  expect_user_error(dir, "predict --run run --input x.csv --weights ''", {"--weights: expected a weights file"});
  expect_user_error(dir, "evaluate --run run --data ok.json --weights ''", {"--weights: expected a weights file"});
  expect_user_error(dir, "export run --format onnx -o m.onnx --weights ''", {"--weights: expected a weights file"});
  expect_user_error(dir, "race-check --graph ''", {"--graph: expected a train config, got an empty string"});
  expect_user_error(dir, "profile ok.json --loss ''", {"--loss: expected a loss name, got an empty string"});
  // An empty input path named no flag ("cannot open file", "no such run directory"): each names its own.
  for (const auto& [command, needle] : std::vector<std::pair<std::string, std::string>>{
           {"summary ''", "spec: expected a model spec, train config, run directory or Keras model JSON"},
           {"graph ''", "spec: expected a model spec, train config, run directory or Keras model JSON"},
           {"profile ''", "config: expected a train config or a model spec"},
           {"train ''", "config: expected a train config"},
           {"import-keras ''", "file: expected a Keras model JSON file"},
           {"export '' -o m.onnx", "run: expected a run directory"},
           {"predict --run '' --input x.csv", "--run: expected a run directory"},
           {"predict --run run --input ''", "--input: expected a CSV file"},
           {"evaluate --run '' --data ok.json", "--run: expected a run directory"},
           {"evaluate --run run --data ''", "--data: expected a train config or a CSV file"}})
    expect_user_error(dir, command, {needle + ", got an empty string"});
  // A device that never ends is named as one, not as a file too large.
  expect_user_error(dir, "race-check --graph /dev/zero",
                    {"/dev/zero", "a character device that gave more than 64 MiB, the most this file may hold"});
}

TEST_CASE("a path the file system refuses is a user's error with its reason, not an escaped filesystem_error") {
  TempDir dir;
  const std::string too_long(300, 'a');
  dir.write("config.json", R"({"model": ")" + too_long + R"(.json", "data": {"dataset": "iris"}})");
  expect_user_error(dir, "train config.json --quiet", {"config.json: model:", "File name too long"});
  expect_user_error(dir, "summary " + too_long + ".json", {"File name too long"});
  expect_user_error(dir, "train " + quoted(source_path("configs/iris_mlp.json")) + " --quiet --resume " + too_long,
                    {"cannot resume"});
}

TEST_CASE("a config's model or data file that is a FIFO, a device or a directory is named for what it is") {
  TempDir dir;
  REQUIRE(::mkfifo((dir / "pipe").c_str(), 0600) == 0);
  std::filesystem::create_directory(dir / "folder");
  const std::string spec = R"({"input_shape": [4], "layers": [{"type": "Dense", "units": 3}]})";
  // FIFOs and devices were reported as files that do not exist.
  const std::vector<std::pair<std::string, std::string>> kinds{
      {"pipe", "is a FIFO (a named pipe), not a regular file"},
      {"/dev/zero", "is a character device, not a regular file"},
      {"folder", "is a directory"}};
  for (const auto& [path, kind] : kinds) {
    dir.write("model.json", iris_config("\"" + path + "\""));
    expect_user_error(dir, "train model.json --quiet", {"model.json: model: model file " + path + " " + kind});
    dir.write("data.json", R"({"model": )" + spec + R"(, "data": {"csv": ")" + path + R"("}, "output": "run"})");
    expect_user_error(dir, "train data.json --quiet", {"data.json: data.csv: data file " + path + " " + kind});
  }
  // A spec named on the command line is read once, so it may still come through a pipe (`summary <(cat f)`).
  dir.write("spec.json", spec);
  const CommandResult piped = run_shell_command(
      "timeout 20 sh -c 'cat spec.json >pipe' & timeout 20 " + quoted(TENSORCTL_BINARY) + " summary pipe", dir.path());
  INFO(piped.out);
  CHECK(piped.status == 0);
  CHECK(piped.out.find("Total params: 15") != std::string::npos);
}

TEST_CASE("a run's files turned hostile: endless devices, a directory in a file's place, outputs onto the run") {
  TempDir dir;
  const std::string iris = quoted(source_path("configs/iris_mlp.json"));
  REQUIRE(run_tensorctl("train " + iris + " --epochs 2 --output run --quiet", dir.path()).status == 0);
  // A spec, a weights file or a CSV that never ends is refused without filling memory.
  expect_user_error(dir, "summary /dev/zero", {"/dev/zero: a character device that gave more than 64 MiB"});
  expect_user_error(dir, "predict --run run --weights /dev/zero --input run/test.csv",
                    {"/dev/zero: header: invalid JSON"});
  // An output onto a run's own files would destroy the run, and one onto the input what the command reads:
  // refused for every command that writes a file, through a symbolic link too.
  expect_user_error(dir, "export run -o run/weights.safetensors",
                    {"-o: run/weights.safetensors is the file weights.safetensors of the run in"});
  expect_user_error(dir, "predict --run run --input run/test.csv --output run/test.csv",
                    {"--output: run/test.csv is the file this command reads"});
  expect_user_error(dir, "graph run -o run/model.json", {"-o: run/model.json is the file this command reads"});
  expect_user_error(dir, "graph run --format json -o run/checkpoint.safetensors",
                    {"-o: run/checkpoint.safetensors is the file checkpoint.safetensors of the run in"});
  expect_user_error(dir, "profile run/model.json --iterations 1 --trace run/history.csv",
                    {"--trace: run/history.csv is the file history.csv of the run in"});
  // The files a config reads through its keys (its model spec, its data) count as much as the one named.
  dir.write("c.json", R"({"model": "spec.json", "data": {"csv": "rows.csv"}})");
  dir.write("spec.json", R"({"input_shape": [2], "layers": [{"type": "Dense", "units": 2}]})");
  dir.write("rows.csv", "a,b,label\n1,2,0\n");
  expect_user_error(dir, "profile c.json --iterations 1 --trace spec.json",
                    {"--trace: spec.json is the file this command reads"});
  expect_user_error(dir, "profile c.json --iterations 1 --trace rows.csv",
                    {"--trace: rows.csv is the file this command reads"});
  expect_user_error(dir, "graph c.json -o spec.json", {"-o: spec.json is the file this command reads"});
  expect_user_error(dir, "tune c.json --budget 1 -o spec.json", {"-o: spec.json is the file this command reads"});
  dir.write("k.json", read_text(source_path("tests/data/keras/mlp_keras2.json")));
  expect_user_error(dir, "import-keras k.json -o run/summary.json",
                    {"--output: run/summary.json is the file summary.json of the run in"});
  expect_user_error(dir, "import-keras k.json -o k.json", {"--output: k.json is the file this command reads"});
  std::filesystem::create_symlink("run/weights.safetensors", dir / "to_weights");
  expect_user_error(dir, "predict --run run --input run/test.csv --output to_weights",
                    {"--output: to_weights is the file weights.safetensors of the run in"});
  std::filesystem::create_symlink("run/test.csv", dir / "to_test");
  expect_user_error(dir, "predict --run run --input run/test.csv --output to_test",
                    {"--output: to_test leads to run/test.csv, the file this command reads"});
  std::filesystem::create_symlink("run/summary.json", dir / "to_summary");
  expect_user_error(dir, "export run -o to_summary", {"-o: to_summary is the file summary.json of the run in"});
  // A layer without a name in model.json gets its default, in export as in predict.
  nlohmann::json model = read_json(dir / "run/model.json");
  for (auto& layer : model["layers"]) layer.erase("name");
  dir.write("run/model.json", model.dump(2));
  CHECK(run_tensorctl("predict --run run --input run/test.csv --output p.csv", dir.path()).status == 0);
  const CommandResult exported = run_tensorctl("export run -o m.onnx", dir.path());
  INFO(exported.err);
  CHECK(exported.status == 0);
  // A directory where the run writes a file: refused before training, not after it.
  std::filesystem::remove(dir / "run/summary.json");
  std::filesystem::create_directory(dir / "run/summary.json");
  expect_user_error(dir, "train " + iris + " --resume run --epochs 3 --quiet",
                    {"run/summary.json: cannot resume: a directory stands where the run writes this file"});
}

// The cases named "under an address-space limit" cap it with ulimit -v, which the sanitizers' shadow memory
// cannot live under: tests/CMakeLists.txt leaves them out of the sanitized suite.
TEST_CASE("under an address-space limit: a CSV of /dev/urandom is refused at its first NUL byte") {
  TempDir dir;
  const std::string iris = quoted(source_path("configs/iris_mlp.json"));
  REQUIRE(run_tensorctl("train " + iris + " --epochs 1 --output run --quiet", dir.path()).status == 0);
  // Under a memory limit, so that reading /dev/urandom to its end fails fast where it is not refused.
  const CommandResult r = run_shell_command(
      "ulimit -v 4000000; exec timeout -k 5 60 " + quoted(TENSORCTL_BINARY) + " predict --run run --input /dev/urandom",
      dir.path());
  check_user_error_in_output(r, {"is a NUL byte, which no CSV text holds: this is binary data"});
  CHECK(r.out.starts_with("error: /dev/urandom: line "));
}

TEST_CASE("under an address-space limit: a model that needs more is refused before anything is allocated") {
  TempDir dir;
  // 16 GB of weights against 3.8 GB of address space, on a machine with more memory than the weights need:
  // before, the budget was the machine's memory, and the first allocation failed with exit 1.
  dir.write("big.json", R"({"input_shape": [1], "layers": [{"type": "Dense", "units": 2147483648}]})");
  const CommandResult r = run_shell_command(
      "ulimit -v 4000000; exec timeout -k 5 60 " + quoted(TENSORCTL_BINARY) + " summary big.json", dir.path());
  check_user_error_in_output(r, {});
  CHECK(
      r.out.starts_with("error: big.json: layers[0]: the model's weights need 16.00 GB, more than the memory "
                        "limit of 3.81 GB"));
}

TEST_CASE("a CSV of binary data given as a config's data is refused at its first NUL byte") {
  TempDir dir;
  dir.write("blob.csv", std::string("x,label\n1,0\n\x1f\x8b\x08\0\0\0", 18));
  dir.write("config.json", R"({"model": {"input_shape": [1], "layers": [{"type": "Dense", "units": 2}]},
                               "data": {"csv": "blob.csv"}, "output": "out"})");
  expect_user_error(dir, "train config.json --quiet", {"blob.csv: line 3: byte 16 is a NUL byte"});
}

TEST_CASE("a model or layer name holding a control character is refused, quoted with it escaped") {
  TempDir dir;
  dir.write("m.json", R"({"name": "m\u001b[2Jx", "input_shape": [4], "layers": [{"type": "Dense", "units": 3}]})");
  expect_user_error(dir, "summary m.json",
                    {"m.json: name: a model name must contain no control character, got \"m\\u001b[2Jx\""});
  dir.write("l.json", R"({"input_shape": [4], "layers": [{"type": "Dense", "units": 3, "name": "x\u0000y"}]})");
  expect_user_error(dir, "summary l.json", {"l.json: layers[0].name:", "got \"x\\u0000y\""});
}

TEST_CASE("what a hostile sweep found: messages that named the wrong thing, and flags silently ignored") {
  TempDir dir;
  const std::string iris = quoted(source_path("configs/iris_mlp.json"));
  const std::string model = source_path("configs/models/iris_mlp.json").string();
  // A factor of 0 and one of 1 broke the same rule, in two wordings.
  for (const char* factor : {"0", "1"}) {
    dir.write("f.json", R"({"model": ")" + model + R"(", "data": {"dataset": "iris"},
      "callbacks": [{"type": "ReduceLROnPlateau", "factor": )" +
                            factor + "}]}");
    expect_user_error(
        dir, "train f.json",
        {std::string("f.json: callbacks[0].factor: expected a factor above 0 and below 1, got ") + factor});
  }
  // A file given for a run directory is called a file, not a missing directory.
  expect_user_error(dir, "train " + iris + " --resume f.json", {"f.json: cannot resume: a file, not a run directory"});
  // A directory without a run in it is not a run directory, whatever command reads it.
  std::filesystem::create_directory(dir / "plain");
  expect_user_error(dir, "summary plain", {"plain: not a run directory: model.json is missing"});
  expect_user_error(dir, "graph plain", {"plain: not a run directory: model.json is missing"});
  // --graph runs no scenario: a scenario's flags beside it were ignored.
  expect_user_error(dir, "race-check --graph f.json --scenario counter", {"--graph", "--scenario"});
  expect_user_error(dir, "race-check --graph f.json --threads 2", {"--graph", "--threads"});
  // A seed past the 64-bit range says where the range ends.
  expect_user_error(
      dir, "train " + iris + " --seed 18446744073709551615",
      {"--seed: expected a non-negative integer of at most 9223372036854775807, got 18446744073709551615"});
  // A path with a terminal escape in it is escaped on the success path too, as in errors.
  const CommandResult r = run_tensorctl("train " + iris + " --epochs 1 --output " + quoted("r\x1b[31mx"), dir.path());
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find("run saved to r\\u001b[31mx") != std::string::npos);
  CHECK(r.out.find('\x1b') == std::string::npos);
}

TEST_CASE("under an address-space limit: a thread count the system refuses is one line and exit 1, never a hang") {
  TempDir dir;
  // 3 GB of address space holds a few hundred 8 MB thread stacks, not 1,024. The pool stopped and joined the
  // threads it had started; before, it destroyed its condition variable under them and hung, deaf to SIGTERM.
  const CommandResult r = run_shell_command("ulimit -v 3000000; exec timeout -k 5 60 " + quoted(TENSORCTL_BINARY) +
                                                " train " + quoted(source_path("configs/iris_mlp.json")) +
                                                " --epochs 1 --quiet --output run --inter-op-threads 1024",
                                            dir.path());
  INFO(r.out);  // stdout and stderr together
  CHECK(r.status == 1);
  CHECK(r.out.starts_with("error: cannot start a pool of 1024 threads: the system refused thread "));
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1);
}

}  // namespace
}  // namespace tctl::cli_test
