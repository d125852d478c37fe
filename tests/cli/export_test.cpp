// tensorctl export --format onnx: every shipped config's trained run, and a model with every layer type,
// exported, accepted by the ONNX checker, and reproducing `tensorctl predict` within 1e-5 in an evaluator of
// our own (tests/onnx/evaluate_onnx.py, numpy). Mistakes are refused, writing nothing.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <doctest/doctest.h>

#include "cli/cli_test_util.h"

namespace tctl::cli_test {
namespace {

namespace fs = std::filesystem;

// Trains `config` briefly into d/run, exports it, predicts its test rows, and checks the export against them.
void check_export(const TempDir& d, const std::string& config) {
  CAPTURE(config);
  REQUIRE(run_tensorctl("train " + config + " --quiet --epochs 2 --output run --overwrite", d.path()).status == 0);
  CommandResult e = run_tensorctl("export run --format onnx -o model.onnx", d.path());
  REQUIRE(e.status == 0);
  CHECK(e.err.find("wrote model.onnx (ONNX opset 17") != std::string::npos);
  REQUIRE(run_tensorctl("predict --run run --input run/test.csv --output predictions.csv", d.path()).status == 0);
  // Debian's python3-onnx (scripts/setup.sh installs it); a machine without it skips the comparison.
  if (run_shell_command("/usr/bin/python3 -c 'import onnx, numpy'", d.path()).status != 0) {
    MESSAGE("/usr/bin/python3 has no onnx module (python3-onnx): the comparison with predict is skipped");
    return;
  }
  const CommandResult eval =
      run_shell_command("/usr/bin/python3 " + quoted(source_path("tests/onnx/evaluate_onnx.py")) +
                            " model.onnx run/test.csv predictions.csv run/summary.json",
                        d.path());
  INFO(eval.out);
  CHECK(eval.status == 0);
  CHECK(eval.out.find("max |onnx - predict|") != std::string::npos);
}

}  // namespace

TEST_SUITE("export") {
  TEST_CASE("every shipped config's run exports to ONNX that reproduces predict within 1e-5") {
    TempDir d;
    std::vector<fs::path> configs;
    for (const auto& f : fs::directory_iterator(source_path("configs")))
      if (f.path().extension() == ".json") configs.push_back(f.path());
    std::sort(configs.begin(), configs.end());
    REQUIRE(configs.size() >= 8);
    for (const auto& config : configs) check_export(d, quoted(config));
  }

  TEST_CASE("a model with every layer type exports: Reshape, Conv2D strides, pooling, batch norm, GELU, Parallel") {
    TempDir d;
    d.write("train.json", R"({"data": "digits", "seed": 5, "optimizer": {"type": "adam", "learning_rate": 0.01},
      "model": {"name": "every_layer", "input_shape": [64], "layers": [
        {"type": "Reshape", "target_shape": [8, 8, 1]},
        {"type": "Conv2D", "filters": 6, "kernel_size": [3, 2], "strides": 2, "padding": "same", "activation": "elu"},
        {"type": "AveragePooling2D", "pool_size": 2, "strides": 1, "padding": "same"},
        {"type": "MaxPooling2D", "pool_size": [2, 1], "padding": "valid"},
        {"type": "BatchNormalization"},
        {"type": "Activation", "activation": "gelu"},
        {"type": "Conv2D", "filters": 4, "kernel_size": 1, "use_bias": false},
        {"type": "Flatten"},
        {"type": "Parallel", "merge": "add", "branches": [
          [{"type": "Dense", "units": 12, "activation": "tanh"}],
          [{"type": "Dense", "units": 12, "activation": "leaky_relu"}, {"type": "Dropout", "rate": 0.2}]]},
        {"type": "Parallel", "branches": [
          [{"type": "Dense", "units": 5, "activation": "sigmoid"}],
          [{"type": "Dense", "units": 3, "activation": "relu"}, {"type": "Delay", "ms": 0}]]},
        {"type": "Dense", "units": 10, "activation": "softmax"}]}})");
    check_export(d, "train.json");
  }

  TEST_CASE("export refuses an unknown format, a missing run and an unwritable output, writing nothing") {
    TempDir d;
    expect_user_error(d, "export nowhere -o m.onnx", {"nowhere: no such run directory"});
    REQUIRE(run_tensorctl("train " + quoted(source_path("configs/iris_mlp.json")) + " --quiet --epochs 1 --output run",
                          d.path())
                .status == 0);
    expect_user_error(d, "export run --format tflite -o m.tflite",
                      {"--format: unknown format \"tflite\" (known: onnx)"});
    expect_user_error(d, "export run -o missing/m.onnx", {"-o"});
  }
}

}  // namespace tctl::cli_test
