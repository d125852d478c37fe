// One test per kind of user mistake (issue 2, "Bad input"): each exits 2 with one line on stderr naming the
// file and the place in it, writes nothing, and never crashes. Plus one runtime failure, which exits 1.
#include <doctest/doctest.h>

#include "cli/cli_test_util.h"
#include "core/text.h"
#include "models/nn/layer.h"

namespace tctl::cli_test {
namespace {

// A model for iris: 4 features, 3 classes.
std::string model_with_layers(const std::string& layers, const std::string& input_shape = "[4]") {
  return R"({"name": "tiny", "input_shape": )" + input_shape + R"(, "layers": [)" + layers + "]}\n";
}
const std::string kLayers = R"({"type": "Dense", "units": 8, "activation": "relu"},
    {"type": "Dense", "units": 3, "activation": "softmax"})";

// A train config reading model.json; `extra` adds top-level keys (with a leading comma).
std::string config_with(const std::string& extra = "", const std::string& data = R"("iris")") {
  return R"({"model": "model.json", "data": )" + data + R"(, "epochs": 1, "output": "run")" + extra + "}\n";
}

// 4 features and a label, 3 classes, with enough rows for the default splits.
const std::string kCsv =
    "a,b,c,d,label\n"
    "5.1,3.5,1.4,0.2,0\n4.9,3.0,1.4,0.2,0\n7.0,3.2,4.7,1.4,1\n6.4,3.2,4.5,1.5,1\n6.3,3.3,6.0,2.5,2\n"
    "5.8,2.7,5.1,1.9,2\n5.0,3.6,1.4,0.2,0\n6.9,3.1,4.9,1.5,1\n7.1,3.0,5.9,2.1,2\n4.6,3.1,1.5,0.2,0\n";

// A scratch directory holding model.json and config.json; the test then breaks one thing.
struct Scratch {
  TempDir dir;
  explicit Scratch(const std::string& model = model_with_layers(kLayers), const std::string& config = config_with()) {
    dir.write("model.json", model);
    dir.write("config.json", config);
  }
};

// A small run trained once and shared by the predict and evaluate cases (they only read it).
const TempDir& trained_iris_run() {
  static TempDir run_dir;
  static bool trained = false;
  if (!trained) {
    Scratch s;
    CommandResult r = run_tensorctl("train config.json --quiet --output " + quoted(run_dir / "run"), s.dir.path());
    REQUIRE(r.status == 0);
    trained = true;
  }
  return run_dir;
}

// The first `columns` of the run's test.csv (header and rows), i.e. with trailing columns dropped.
std::string test_csv_columns(std::size_t columns) {
  std::string out;
  for (const auto& line : split_lines(read_text(trained_iris_run() / "run/test.csv"))) {
    auto cells = split_cells(line);
    for (std::size_t i = 0; i < columns && i < cells.size(); ++i) out += (i ? "," : "") + cells[i];
    out += "\n";
  }
  return out;
}

}  // namespace

TEST_SUITE("bad input") {
  TEST_CASE("invalid JSON in the config names the line and column") {
    Scratch s;
    s.dir.write("config.json", "{\n  \"model\": \"model.json\",\n  \"epochs\": ,\n  \"data\": \"iris\"\n}\n");
    expect_user_error(s.dir, "train config.json", {"config.json: line 3, column 13: invalid JSON"});
  }

  TEST_CASE("invalid JSON in the model file names that file, line and column") {
    Scratch s("{\"input_shape\": [4],\n \"layers\": [\n  {\"type\": \"Dense\" \"units\": 3}\n]}\n");
    expect_user_error(s.dir, "train config.json", {"model.json: line 3, column", "invalid JSON"});
  }

  TEST_CASE("allow_tf32 that is not true or false names the key") {
    Scratch s(model_with_layers(kLayers), config_with(R"(, "allow_tf32": "yes")"));
    expect_user_error(s.dir, "train config.json", {"config.json", "allow_tf32", "expected true or false"});
  }

  TEST_CASE("unknown layer type lists the known types") {
    Scratch s(model_with_layers(R"({"type": "Dense", "units": 8}, {"type": "Conv9", "units": 3})"));
    expect_user_error(
        s.dir, "train config.json",
        {R"(model.json: layers[1].type: unknown layer type "Conv9")", "known: " + join(layer_type_names())});
  }

  TEST_CASE("unknown activation lists the known ones") {
    Scratch s(model_with_layers(R"({"type": "Dense", "units": 3, "activation": "swish"})"));
    expect_user_error(s.dir, "train config.json",
                      {R"(model.json: layers[0].activation: unknown value "swish")",
                       "known: elu, gelu, leaky_relu, linear, relu, sigmoid, softmax, tanh"});
  }

  TEST_CASE("terminal escapes and line breaks in a spec are shown escaped, on one line") {
    // check_user_error also checks that stderr carries no control character.
    Scratch s(model_with_layers(R"({"type": "Dense", "units": 3, "activation": "re\u001b[2J\nlu"})"));
    expect_user_error(s.dir, "train config.json",
                      {R"(model.json: layers[0].activation: unknown value "re\u001b[2J\nlu")"});
    Scratch key(model_with_layers(R"({"type": "Dense", "units": 3, "units\u009b2J": 1})"));
    expect_user_error(key.dir, "train config.json", {R"(model.json: layers[0]["units\u009b2J"]: unknown key)"});
    expect_user_error(s.dir, "summary \"$(printf 'no\033[2J\377such.json')\"",
                      {R"(no\u001b[2J\xffsuch.json: cannot open file)"});
  }

  TEST_CASE("units so large the kernel could not be allocated") {
    Scratch s(model_with_layers(R"({"type": "Dense", "units": 3000000000}, {"type": "Dense", "units": 3})"));
    expect_user_error(s.dir, "train config.json", {"model.json: layers[0].units:", "larger than the 2^31 elements"});
  }

  TEST_CASE("units given as a string") {
    Scratch s(model_with_layers(R"({"type": "Dense", "units": "8"}, {"type": "Dense", "units": 3})"));
    CommandResult r = expect_user_error(s.dir, "train config.json", {});
    CHECK(r.err == "error: model.json: layers[0].units: expected a positive integer, got \"8\"\n");
  }

  TEST_CASE("negative units") {
    Scratch s(model_with_layers(
        R"({"type": "Dense", "units": 8}, {"type": "Dropout", "rate": 0.1}, {"type": "Dense", "units": -3})"));
    CommandResult r = expect_user_error(s.dir, "train config.json", {});
    CHECK(r.err == "error: model.json: layers[2].units: expected a positive integer, got -3\n");
  }

  TEST_CASE("zero units") {
    Scratch s(model_with_layers(R"({"type": "Dense", "units": 0})"));
    CommandResult r = expect_user_error(s.dir, "train config.json", {});
    CHECK(r.err == "error: model.json: layers[0].units: expected a positive integer, got 0\n");
  }

  TEST_CASE("Dropout rate of 1.0 is outside [0, 1)") {
    Scratch s(model_with_layers(R"({"type": "Dropout", "rate": 1.0}, {"type": "Dense", "units": 3})"));
    expect_user_error(s.dir, "train config.json",
                      {"model.json: layers[0].rate: expected a number in [0", "1.0)", "got 1.0"});
  }

  TEST_CASE("negative Dropout rate") {
    Scratch s(model_with_layers(R"({"type": "Dense", "units": 3}, {"type": "Dropout", "rate": -0.1})"));
    expect_user_error(s.dir, "train config.json", {"model.json: layers[1].rate: expected a number in [0", "got -0.1"});
  }

  TEST_CASE("missing required key units") {
    Scratch s(model_with_layers(R"({"type": "Dense", "activation": "relu"})"));
    CommandResult r = expect_user_error(s.dir, "train config.json", {});
    CHECK(r.err == "error: model.json: layers[0]: missing required key \"units\"\n");
  }

  TEST_CASE("misspelled layer key is an error, not ignored") {
    Scratch s(model_with_layers(R"({"type": "Dense", "units": 3, "unit": 3})"));
    expect_user_error(s.dir, "train config.json", {"model.json: layers[0].unit: unknown key", "units"});
  }

  TEST_CASE("unknown top-level config key") {
    Scratch s(model_with_layers(kLayers), config_with(R"(, "epoch": 3)"));
    expect_user_error(s.dir, "train config.json", {"config.json: epoch: unknown key", "epochs"});
  }

  TEST_CASE("a name or a path that is not UTF-8 is refused before any work, naming the file, line and column") {
    // The run's JSON files hold UTF-8 only: the first write after epoch 1 ended the run with nlohmann's
    // "invalid UTF-8 byte at index 4: 0x6F" (no file, line or key) and left a directory nothing accepted.
    Scratch s(model_with_layers(kLayers), config_with("", R"({"csv": "data.csv"})"));
    std::string header = kCsv;
    header.replace(header.find("a,b"), 1, "\xff");
    s.dir.write("data.csv", header);
    expect_user_error(s.dir, "train config.json --quiet",
                      {"data.csv: line 1: column 1's name \"\\xff\" holds the byte 0xff at offset 0, which is not "
                       "UTF-8"});
    // A class name, on the line where it is.
    std::string classes = "a,b,c,d,label\n";
    for (int i = 0; i < 10; ++i)
      classes += "5.1,3.5,1.4,0.2," + std::string(i == 7 ? "bad\xc3(" : (i % 2 ? "setosa" : "virginica")) + "\n";
    s.dir.write("data.csv", classes);
    expect_user_error(s.dir, "train config.json --quiet",
                      {"data.csv: line 9: column \"label\": class name \"bad\\xc3(\" holds the byte 0xc3 at offset 3"});
    // The run directory's path.
    s.dir.write("data.csv", kCsv);
    expect_user_error(s.dir, "train config.json --quiet --output $(printf 'run\\345')",
                      {"the run directory (--output, --resume or the config's \"output\") \"run\\xe5\" holds the byte "
                       "0xe5 at offset 3"});
  }

  TEST_CASE("splits that leave no row to train on are refused before training") {
    Scratch s(model_with_layers(kLayers),
              config_with("", R"({"dataset": "iris", "test_split": 0.5, "validation_split": 0.999999})"));
    expect_user_error(s.dir, "train config.json",
                      {"config.json: data: no rows are left for training after the test and validation splits"});
  }

  TEST_CASE("unknown key in an inline model names its JSON path in the config") {
    Scratch s;
    s.dir.write("config.json",
                R"({"model": {"input_shape": [4], "layers": [{"type": "Dense", "units": 3}], "layer": []},
                                 "data": "iris", "output": "run"})");
    expect_user_error(s.dir, "train config.json", {"config.json: model.layer: unknown key"});
  }

  TEST_CASE("missing config file") {
    Scratch s;
    expect_user_error(s.dir, "train absent.json", {"absent.json: cannot open file"});
  }

  TEST_CASE("missing model file referenced by the config") {
    Scratch s(model_with_layers(kLayers), R"({"model": "models/absent.json", "data": "iris", "output": "run"})");
    expect_user_error(s.dir, "train config.json", {"config.json: model: model file models/absent.json does not exist"});
  }

  TEST_CASE("missing CSV file referenced by the config") {
    Scratch s(model_with_layers(kLayers), config_with("", R"({"csv": "absent.csv"})"));
    expect_user_error(s.dir, "train config.json", {"config.json: data.csv: data file absent.csv does not exist"});
  }

  TEST_CASE("CSV with a ragged row names the line") {
    Scratch s(model_with_layers(kLayers), config_with("", R"({"csv": "data.csv"})"));
    s.dir.write("data.csv", "a,b,c,d,label\n5.1,3.5,1.4,0.2,0\n4.9,3.0,1.4,0.2,0\n7.0,3.2,4.7,1\n6.4,3.2,4.5,1.5,1\n");
    CommandResult r = expect_user_error(s.dir, "train config.json", {});
    CHECK(r.err == "error: data.csv: line 4: expected 5 cells, got 4\n");
  }

  TEST_CASE("CSV with a non-numeric cell names the line and column") {
    Scratch s(model_with_layers(kLayers), config_with("", R"({"csv": "data.csv"})"));
    s.dir.write("data.csv", "a,b,c,d,label\n5.1,3.5,1.4,0.2,0\n4.9,abc,1.4,0.2,0\n7.0,3.2,4.7,1.4,1\n");
    CommandResult r = expect_user_error(s.dir, "train config.json", {});
    CHECK(r.err == "error: data.csv: line 3: column \"b\": expected a finite number, got \"abc\"\n");
  }

  TEST_CASE("CSV label larger than the model's outputs names the line") {
    Scratch s(model_with_layers(kLayers), config_with("", R"({"csv": "data.csv"})"));
    std::string csv = kCsv;
    csv.replace(csv.find("6.4,3.2,4.5,1.5,1"), 17, "6.4,3.2,4.5,1.5,7");  // line 5
    s.dir.write("data.csv", csv);
    expect_user_error(s.dir, "train config.json",
                      {"data.csv: line 5: label 7 does not fit the model's 3 outputs", "model.json layers[1]", "0..2"});
  }

  TEST_CASE("CSV label that is not a class index names the line") {
    Scratch s(model_with_layers(kLayers), config_with("", R"({"csv": "data.csv"})"));
    std::string csv = kCsv;
    csv.replace(csv.find("4.9,3.0,1.4,0.2,0"), 17, "4.9,3.0,1.4,0.2,-1");  // line 3
    s.dir.write("data.csv", csv);
    expect_user_error(s.dir, "train config.json",
                      {"data.csv: line 3: column \"label\": class labels must be integers"});
  }

  TEST_CASE("built-in data set with more classes than the model has outputs") {
    Scratch s(model_with_layers(R"({"type": "Dense", "units": 2, "activation": "softmax"})"));
    expect_user_error(s.dir, "train config.json",
                      {"config.json: data: dataset iris has labels 0..2", "model.json layers[0]", "only 2 outputs"});
  }

  TEST_CASE("data feature count does not match the model's input_shape") {
    Scratch s(model_with_layers(kLayers, "[5]"));
    expect_user_error(
        s.dir, "train config.json",
        {"config.json: data: dataset iris has 4 features per row", "input_shape [5] (model.json input_shape)"});
  }

  TEST_CASE("a classifier whose output is not flat, its Dense layers acting on each step") {
    Scratch s(model_with_layers(kLayers, "[2, 2]"));
    expect_user_error(s.dir, "train config.json",
                      {"config.json: loss: cross-entropy needs a (None, classes) output, got (None, 2, 3)",
                       "add a Flatten or a global pooling layer"});
  }

  TEST_CASE("unknown loss lists the known ones") {
    Scratch s(model_with_layers(kLayers), config_with(R"(, "loss": "hinge")"));
    expect_user_error(s.dir, "train config.json",
                      {R"(config.json: loss: unknown value "hinge")", "sparse_categorical_crossentropy", "mse"});
  }

  TEST_CASE("unknown optimizer type lists the known ones") {
    Scratch s(model_with_layers(kLayers), config_with(R"(, "optimizer": {"type": "nadam"})"));
    expect_user_error(
        s.dir, "train config.json",
        {R"(config.json: optimizer.type: unknown value "nadam" (known: sgd, adam, adamw, rmsprop, adagrad))"});
  }

  TEST_CASE("a bad schedule value names its JSON path; per-variable clipping points to global_clipnorm") {
    Scratch s(
        model_with_layers(kLayers),
        config_with(
            R"(, "optimizer": {"type": "adam", "schedule": {"type": "exponential", "decay_steps": 10, "decay_rate": 0}})"));
    CommandResult r = expect_user_error(s.dir, "train config.json", {});
    CHECK(r.err == "error: config.json: optimizer.schedule.decay_rate: expected a positive number, got 0\n");
    Scratch c(model_with_layers(kLayers), config_with(R"(, "optimizer": {"type": "sgd", "clipnorm": 1.0})"));
    expect_user_error(c.dir, "train config.json", {"config.json: optimizer.clipnorm:", "use global_clipnorm"});
  }

  TEST_CASE("negative learning rate") {
    Scratch s(model_with_layers(kLayers), config_with(R"(, "optimizer": {"type": "sgd", "learning_rate": -0.1})"));
    CommandResult r = expect_user_error(s.dir, "train config.json", {});
    CHECK(r.err == "error: config.json: optimizer.learning_rate: expected a positive number, got -0.1\n");
  }

  TEST_CASE("unknown dataset lists the built-in ones") {
    Scratch s(model_with_layers(kLayers), config_with("", R"({"dataset": "mnist"})"));
    CommandResult r = expect_user_error(s.dir, "train config.json", {});
    CHECK(r.err == "error: config.json: data.dataset: unknown dataset \"mnist\" (known: digits, iris, spirals)\n");
  }

  TEST_CASE("--epochs below 0 is refused") {
    Scratch s;
    expect_user_error(s.dir, "train config.json --epochs -1", {"--epochs: expected a non-negative integer, got -1"});
  }

  TEST_CASE("--epochs that is not a number is refused") {
    Scratch s;
    expect_user_error(s.dir, "train config.json --epochs ten",
                      {"--epochs: expected a non-negative integer, got \"ten\""});
  }

  TEST_CASE("thread count flag out of range") {
    Scratch s;
    expect_user_error(s.dir, "train config.json --intra-op-threads -1", {"--intra-op-threads", "0..1024"});
  }

  TEST_CASE("unknown flag") {
    Scratch s;
    expect_user_error(s.dir, "train config.json --epoks 3", {"--epoks", "tensorctl train --help"});
  }

  TEST_CASE("unknown command lists the known ones") {
    Scratch s;
    expect_user_error(s.dir, "trian config.json", {R"(unknown command "trian")", "train, predict, evaluate, summary"});
  }

  TEST_CASE("no command") {
    Scratch s;
    expect_user_error(s.dir, "", {"a command is required"});
  }

  TEST_CASE("predict with a missing run directory") {
    Scratch s;
    s.dir.write("input.csv", kCsv);
    expect_user_error(s.dir, "predict --run no_such_run --input input.csv --output predictions.csv",
                      {"no_such_run: no such run directory"});
  }

  TEST_CASE("predict with an input CSV missing a feature column") {
    const TempDir& run = trained_iris_run();
    TempDir d;
    d.write("input.csv", "sepal_length,sepal_width,petal_length,label\n5.1,3.5,1.4,0\n");
    expect_user_error(d, "predict --run " + quoted(run / "run") + " --input input.csv --output predictions.csv",
                      {R"(input.csv: line 1: missing column "petal_width")",
                       "trained on: sepal_length, sepal_width, petal_length, petal_width"});
  }

  TEST_CASE("predict with a missing input file") {
    const TempDir& run = trained_iris_run();
    TempDir d;
    expect_user_error(d, "predict --run " + quoted(run / "run") + " --input absent.csv --output predictions.csv",
                      {"absent.csv: cannot open file"});
  }

  TEST_CASE("predict into a directory that does not exist") {
    const TempDir& run = trained_iris_run();
    TempDir d;
    d.write("input.csv", test_csv_columns(5));
    expect_user_error(d, "predict --run " + quoted(run / "run") + " --input input.csv --output nowhere/predictions.csv",
                      {"--output: directory nowhere does not exist"});
  }

  TEST_CASE("evaluate with a CSV lacking the label column") {
    const TempDir& run = trained_iris_run();
    TempDir d;
    d.write("features.csv", test_csv_columns(4));
    expect_user_error(d, "evaluate --run " + quoted(run / "run") + " --data features.csv",
                      {R"(features.csv: line 1: no label column "label")"});
  }

  TEST_CASE("evaluate with a label larger than the model's outputs names the line") {
    const TempDir& run = trained_iris_run();
    TempDir d;
    d.write("data.csv",
            "sepal_length,sepal_width,petal_length,petal_width,label\n5.1,3.5,1.4,0.2,0\n4.9,3.0,1.4,0.2,3\n");
    expect_user_error(d, "evaluate --run " + quoted(run / "run") + " --data data.csv",
                      {"data.csv: line 3: label 3 does not fit the model's 3 outputs"});
  }

  TEST_CASE("evaluate with a config whose test split is empty") {
    const TempDir& run = trained_iris_run();
    Scratch s(model_with_layers(kLayers), config_with("", R"({"dataset": "iris", "test_split": 0})"));
    expect_user_error(s.dir, "evaluate --run " + quoted(run / "run") + " --data config.json",
                      {"config.json: data.test_split: the test split is empty"});
  }

  TEST_CASE("evaluate with a config whose data does not fit the run's model names the run's model") {
    const TempDir& run = trained_iris_run();
    Scratch s(model_with_layers(kLayers), config_with("", R"("digits")"));
    expect_user_error(s.dir, "evaluate --run " + quoted(run / "run") + " --data config.json",
                      {"config.json: data: dataset digits has 64 features per row", "run/model.json input_shape"});
  }

  TEST_CASE("summary of a bad spec") {
    Scratch s(model_with_layers(R"({"type": "Dense", "units": -3})"));
    CommandResult r = expect_user_error(s.dir, "summary model.json", {});
    CHECK(r.err == "error: model.json: layers[0].units: expected a positive integer, got -3\n");
  }

  TEST_CASE("a run directory that is a file, or lies under one, is the user's error: exit 2 naming it") {
    Scratch s;
    s.dir.write("blocker", "a regular file, not a folder\n");
    expect_user_error(s.dir, "train config.json --output blocker/run",
                      {"blocker/run: cannot create the run directory: Not a directory"});
    expect_user_error(s.dir, "train config.json --output blocker",
                      {"blocker: the run directory (--output, or the config's \"output\") is a file"});
    expect_user_error(s.dir, "train config.json --output /dev/null", {"/dev/null: the run directory"});
  }

}  // TEST_SUITE

}  // namespace tctl::cli_test
