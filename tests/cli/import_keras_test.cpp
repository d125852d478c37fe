// tensorctl import-keras end to end, and a train config whose "model" is a Keras file.
#include <doctest/doctest.h>

#include "cli/cli_test_util.h"

namespace tctl::cli_test {
namespace {

namespace fs = std::filesystem;

std::string keras_path(const std::string& name) { return quoted(source_path("tests/data/keras/" + name)); }

}  // namespace

TEST_SUITE("import_keras") {
  TEST_CASE("import-keras prints the spec on stdout and a one-line summary on stderr") {
    TempDir d;
    CommandResult r = run_tensorctl("import-keras " + keras_path("mlp_keras2.json"), d.path());
    check_no_crash(r);
    REQUIRE(r.status == 0);
    CHECK(r.err == "converted 5 layers from Keras 2 (keras 2.10.0, tensorflow backend) Sequential 'iris_keras_mlp'\n");
    const nlohmann::json spec = parse_json(r.out);
    CHECK(spec.at("name") == "iris_keras_mlp");
    CHECK(spec.at("input_shape") == nlohmann::json::array({4}));
    REQUIRE(spec.at("layers").size() == 5);
    CHECK(spec.at("layers")[0].at("type") == "Dense");
    CHECK(spec.at("layers")[0].at("kernel_initializer") == "he_normal");
    CHECK(spec.at("layers")[3] ==
          nlohmann::json({{"type", "Activation"}, {"name", "activation"}, {"activation", "tanh"}}));
    // The type leads each layer, so the printed spec reads like a hand-written one.
    CHECK(r.out.find("\"type\": \"Dense\",\n      \"name\": \"dense\"") != std::string::npos);
    CHECK(d.listing().empty());
  }

  TEST_CASE("import-keras -o writes the spec, which summary and the Keras 2 conversion agree on") {
    TempDir d;
    CommandResult r = run_tensorctl("import-keras " + keras_path("mlp_keras3.json") + " -o spec.json", d.path());
    REQUIRE(r.status == 0);
    CHECK(r.out.empty());
    CHECK(r.err == "converted 5 layers from Keras 3 Sequential 'iris_keras_mlp' to spec.json\n");
    CHECK(d.listing() == std::set<std::string>{"spec.json"});
    CommandResult two = run_tensorctl("import-keras " + keras_path("mlp_keras2.json"), d.path());
    REQUIRE(two.status == 0);
    CHECK(read_json(d / "spec.json") == parse_json(two.out));

    CommandResult summary = run_tensorctl("summary --json spec.json", d.path());
    REQUIRE(summary.status == 0);
    CHECK(parse_json(summary.out).at("total_params") == 243);
  }

  TEST_CASE("a Keras 3 .keras archive: its config.json is the architecture read") {
    TempDir d;
    if (run_shell_command("python3 -c 'import zipfile'", d.path()).status != 0) return;
    // The members Keras 3's saving_lib writes, in its order; only config.json is read, weights are not yet.
    const std::string script =
        "import zipfile\n"
        "with zipfile.ZipFile('m.keras', 'w', zipfile.ZIP_DEFLATED) as z:\n"
        "    z.writestr('metadata.json', '{\"keras_version\": \"3.3.3\"}')\n"
        "    z.write(" +
        quoted(source_path("tests/data/keras/mlp_keras3.json")) +
        ", 'config.json')\n"
        "    z.writestr('model.weights.h5', b'')\n"
        "with zipfile.ZipFile('nothing.keras', 'w') as z:\n"
        "    z.writestr('metadata.json', '{}')\n";
    d.write("make.py", script);
    REQUIRE(run_shell_command("python3 make.py", d.path()).status == 0);
    CommandResult json = run_tensorctl("import-keras " + keras_path("mlp_keras3.json"), d.path());
    CommandResult archive = run_tensorctl("import-keras m.keras", d.path());
    REQUIRE_MESSAGE(archive.status == 0, archive.err);
    CHECK(archive.out == json.out);
    CHECK(archive.err.starts_with("converted "));
    expect_user_error(d, "import-keras nothing.keras",
                      {"nothing.keras: a zip archive without config.json: not a Keras 3 .keras file"});
    d.write("broken.keras", std::string("PK\x03\x04", 4) + "not really a zip");
    expect_user_error(d, "import-keras broken.keras", {"broken.keras: not a zip archive libzip can read"});
  }

  TEST_CASE("summary reads a Keras file directly") {
    TempDir d;
    CommandResult r = run_tensorctl("summary --json " + keras_path("mlp_keras3.json"), d.path());
    REQUIRE(r.status == 0);
    const nlohmann::json j = parse_json(r.out);
    CHECK(j.at("name") == "iris_keras_mlp");
    CHECK(j.at("total_params") == 243);
  }

  TEST_CASE("import-keras converts the CNN export (built only once the image layers exist)") {
    TempDir d;
    CommandResult r = run_tensorctl("import-keras " + keras_path("cnn_keras3.json") + " --output cnn.json", d.path());
    REQUIRE(r.status == 0);
    const nlohmann::json spec = read_json(d / "cnn.json");
    CHECK(spec.at("input_shape") == nlohmann::json::array({8, 8, 1}));
    REQUIRE(spec.at("layers").size() == 5);
    CHECK(spec.at("layers")[0].at("type") == "Conv2D");
    CHECK(spec.at("layers")[1].at("type") == "BatchNormalization");
  }

  TEST_CASE("import-keras refuses what it cannot convert: exit 2, one line, nothing written") {
    TempDir d;
    d.write("broken.json", "{\"class_name\": \"Sequential\",\n \"config\": {\"layers\": [}\n}\n");
    d.write("spec.json", R"({"name": "m", "input_shape": [4], "layers": [{"type": "Dense", "units": 2}]})");
    expect_user_error(
        d, "import-keras " + keras_path("timedistributed_keras2.json") + " -o out.json",
        {"timedistributed_keras2.json: config.layers[1]: layer type TimeDistributed (\"time_distributed\") is not "
         "supported (supported: "});
    expect_user_error(
        d, "import-keras " + keras_path("regularizer_keras3.json") + " -o out.json",
        {"config.layers[1].config.kernel_regularizer: Dense layer \"hidden\": kernel_regularizer is not supported"});
    expect_user_error(d, "import-keras " + keras_path("functional_keras2.json") + " -o out.json",
                      {"class_name: this is a Keras Functional model; only Sequential models can be imported"});
    expect_user_error(d, "import-keras broken.json -o out.json", {"broken.json: line 2, column", "invalid JSON"});
    expect_user_error(d, "import-keras spec.json -o out.json", {"spec.json: top level: not a Keras model file"});
    expect_user_error(d, "import-keras missing.json -o out.json", {"missing.json"});
    expect_user_error(d, "import-keras " + keras_path("mlp_keras2.json") + " -o no_such_dir/out.json",
                      {"--output", "no_such_dir"});
    expect_user_error(d, "import-keras", {"file is required"});
    nlohmann::json custom = read_json(source_path("tests/data/keras/mlp_keras3.json"));
    custom["config"]["layers"][3]["registered_name"] = "Custom>Dense";
    d.write("custom.json", custom.dump());
    expect_user_error(d, "import-keras custom.json -o out.json",
                      {"custom.json: config.layers[3].registered_name: Dense layer \"dense_1\": registered as the "
                       "custom class \"Custom>Dense\"; custom layers are not supported"});
  }

  TEST_CASE("a train config whose model is a Keras file trains") {
    TempDir d;
    d.write("config.json",
            R"({"model": )" + nlohmann::json(source_path("tests/data/keras/mlp_keras2.json").string()).dump() + R"(,
    "data": {"dataset": "iris", "test_split": 0.2, "validation_split": 0.1},
    "optimizer": {"type": "adam", "learning_rate": 0.01},
    "epochs": 2, "batch_size": 16, "seed": 3, "output": "run"})");
    CommandResult r = run_tensorctl("train config.json --quiet", d.path());
    check_no_crash(r);
    REQUIRE(r.status == 0);
    CHECK(fs::exists(d / "run/weights.safetensors"));
    const nlohmann::json model = read_json(d / "run/model.json");
    CHECK(model.at("name") == "iris_keras_mlp");
    REQUIRE(model.at("layers").size() == 5);
    CHECK(model.at("layers")[2].at("name") == "dense_1");
  }

  TEST_CASE("a train config whose Keras model cannot be converted is refused with the Keras file's path") {
    TempDir d;
    d.write("config.json",
            R"({"model": )" +
                nlohmann::json(source_path("tests/data/keras/timedistributed_keras2.json").string()).dump() + R"(,
    "data": {"dataset": "iris"}, "epochs": 1, "output": "run"})");
    expect_user_error(d, "train config.json",
                      {"timedistributed_keras2.json: config.layers[1]: layer type TimeDistributed"});
  }

}  // TEST_SUITE

}  // namespace tctl::cli_test
