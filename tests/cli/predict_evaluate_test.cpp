// tensorctl evaluate and predict on a saved run reproduce what train reported, and their outputs have the
// documented shape; --version and --help work for every command.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <tuple>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "cli/cli_test_util.h"
#include "models/io/safetensors.h"

namespace tctl::cli_test {
namespace {

namespace fs = std::filesystem;

// A shipped config trained once with its full settings and shared by the tests below (they only read it).
struct TrainedRun {
  TempDir dir;
  fs::path config;
  fs::path run;
  nlohmann::json summary;
};

const TrainedRun& trained(const std::string& config) {
  static std::map<std::string, std::unique_ptr<TrainedRun>> runs;
  auto& slot = runs[config];
  if (!slot) {
    slot = std::make_unique<TrainedRun>();
    slot->config = source_path(config);
    slot->run = slot->dir / "run";
    CommandResult r = run_tensorctl("train " + quoted(slot->config) + " --quiet --output run", slot->dir.path());
    REQUIRE(r.status == 0);
    slot->summary = read_json(slot->run / "summary.json");
  }
  return *slot;
}

std::string four_decimals(double v) { return fmt::format("{:.4f}", v); }

double test_metric(const TrainedRun& t, const char* name) { return t.summary.at("test").at(name).get<double>(); }

void check_evaluate_json(const TrainedRun& t, const std::string& data, std::int64_t rows,
                         const std::string& flags = "") {
  CommandResult r = run_tensorctl("evaluate --run run --data " + data + " --json" + flags, t.dir.path());
  REQUIRE(r.status == 0);
  const nlohmann::json j = parse_json(r.out);
  for (const char* key : {"run", "data", "rows", "loss", "accuracy"}) CHECK_MESSAGE(j.contains(key), key);
  CHECK(j.at("rows") == rows);
  CHECK(four_decimals(j.at("accuracy").get<double>()) == four_decimals(test_metric(t, "accuracy")));
  CHECK(std::abs(j.at("loss").get<double>() - test_metric(t, "loss")) < 1e-4);
}

// Checks predict's CSV against test.csv's labels and returns its accuracy.
double check_predictions(const std::string& csv, const fs::path& test_csv, int classes) {
  const auto lines = split_lines(csv);
  const auto truth = split_lines(read_text(test_csv));
  REQUIRE(lines.size() == truth.size());
  std::string header;
  for (int c = 0; c < classes; ++c) header += "prob_" + std::to_string(c) + ",";
  CHECK(lines[0] == header + "predicted");
  std::int64_t correct = 0;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const auto cells = split_cells(lines[i]);
    REQUIRE(cells.size() == static_cast<std::size_t>(classes) + 1);
    double sum = 0.0, best = -1.0;
    int argmax = -1;
    for (int c = 0; c < classes; ++c) {
      const double p = std::stod(cells[static_cast<std::size_t>(c)]);
      CHECK(p >= 0.0);
      sum += p;
      if (p > best) best = p, argmax = c;
    }
    CHECK(std::abs(sum - 1.0) < 1e-4);
    CHECK(std::stoi(cells.back()) == argmax);
    correct += cells.back() == split_cells(truth[i]).back();
  }
  return static_cast<double>(correct) / static_cast<double>(lines.size() - 1);
}

// Overwrites element `index` of the float32 tensor `tensor` in a safetensors file with `value`, in place: the
// element's bytes lie at 8 + header length + the tensor's first data offset + 4 * index.
void set_weight(const fs::path& file, const std::string& tensor, std::size_t index, float value) {
  std::string bytes = read_text(file);
  REQUIRE(bytes.size() >= 8);
  std::uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), 8);  // little-endian, as on the machines we test on
  const nlohmann::json header = parse_json(bytes.substr(8, header_length));
  REQUIRE(header.at(tensor).at("dtype") == "F32");
  const std::size_t at = 8 + header_length + header.at(tensor).at("data_offsets").at(0).get<std::size_t>() + 4 * index;
  REQUIRE(at + 4 <= bytes.size());
  std::memcpy(bytes.data() + at, &value, 4);
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
}

}  // namespace

TEST_SUITE("predict and evaluate") {
  TEST_CASE("evaluate --data CONFIG reproduces train's test accuracy") {
    for (const char* config : {"configs/digits_mlp.json", "configs/iris_mlp.json"}) {
      CAPTURE(config);
      const TrainedRun& t = trained(config);
      check_evaluate_json(t, quoted(t.config), t.summary.at("rows").at("test").get<std::int64_t>());
    }
  }

  TEST_CASE("predict's and evaluate's code, linked without models/train, evaluates a run as train tested it") {
    const TrainedRun& t = trained("configs/iris_mlp.json");
    CommandResult r = run_shell_command(std::string(TENSORCTL_RUN_ALONE) + " run " + quoted(t.config), t.dir.path());
    REQUIRE(r.status == 0);
    const std::vector<std::string> lines = split_lines(r.out);
    REQUIRE(lines.size() == 2);
    CHECK(lines[0].starts_with("loss "));
    CHECK(std::abs(std::stod(lines[0].substr(5)) - test_metric(t, "loss")) < 1e-4);
    CHECK(lines[1] == "accuracy " + fmt::format("{:.6f}", test_metric(t, "accuracy")));
  }

  TEST_CASE("evaluate --data RUN/test.csv reproduces train's test accuracy") {
    for (const char* config : {"configs/digits_mlp.json", "configs/iris_mlp.json"}) {
      CAPTURE(config);
      const TrainedRun& t = trained(config);
      check_evaluate_json(t, "run/test.csv", t.summary.at("rows").at("test").get<std::int64_t>());
    }
  }

  TEST_CASE("evaluate with a batch size near 2^63 reports what the default batch size does") {
    // rows + batch - 1 wrapped past 2^63 - rows: zero batches, and "accuracy: 0.0000 - loss: 0.0000".
    const TrainedRun& t = trained("configs/iris_mlp.json");
    const std::int64_t rows = t.summary.at("rows").at("test").get<std::int64_t>();
    for (const std::string& batch : {std::string("9223372036854775807"), std::to_string(INT64_MAX - rows + 1)}) {
      CAPTURE(batch);
      check_evaluate_json(t, quoted(t.config), rows, " --batch-size " + batch);
      check_evaluate_json(t, "run/test.csv", rows, " --batch-size " + batch);
    }
    const TrainedRun& regression = trained("configs/diabetes_regression.json");
    CommandResult r = run_tensorctl("evaluate --run run --data run/test.csv --json --batch-size 9223372036854775807",
                                    regression.dir.path());
    REQUIRE(r.status == 0);
    const double loss = test_metric(regression, "loss");
    CHECK(std::abs(parse_json(r.out).at("loss").get<double>() - loss) <= 1e-4 * std::max(1.0, loss));
  }

  TEST_CASE("evaluate without --json prints one line with the metrics") {
    const TrainedRun& t = trained("configs/iris_mlp.json");
    CommandResult r = run_tensorctl("evaluate --run run --data run/test.csv", t.dir.path());
    REQUIRE(r.status == 0);
    CHECK(split_lines(r.out).size() == 1);
    CHECK(r.out.starts_with("30 rows from run/test.csv"));
    CHECK(r.out.find("accuracy: " + four_decimals(test_metric(t, "accuracy"))) != std::string::npos);
  }

  TEST_CASE("predict --output writes one row per input row and reproduces the test accuracy") {
    for (const auto& [config, classes] :
         std::vector<std::pair<std::string, int>>{{"configs/digits_mlp.json", 10}, {"configs/iris_mlp.json", 3}}) {
      CAPTURE(config);
      const TrainedRun& t = trained(config);
      const auto before = t.dir.listing();
      CommandResult r = run_tensorctl("predict --run run --input run/test.csv --output predictions.csv", t.dir.path());
      REQUIRE(r.status == 0);
      CHECK(r.out.empty());
      const std::string expected = four_decimals(test_metric(t, "accuracy"));
      const std::int64_t rows = t.summary.at("rows").at("test").get<std::int64_t>();
      CHECK(r.err.find("wrote " + std::to_string(rows) + " predictions to predictions.csv") != std::string::npos);
      CHECK(r.err.find("accuracy: " + expected + " (") != std::string::npos);
      const double accuracy = check_predictions(read_text(t.dir / "predictions.csv"), t.run / "test.csv", classes);
      CHECK(four_decimals(accuracy) == expected);

      auto after = t.dir.listing();
      after.erase("predictions.csv");
      CHECK(after == before);  // no temporary file left behind
      fs::remove(t.dir / "predictions.csv");
    }
  }

  TEST_CASE("predict without --output prints the same CSV on stdout") {
    const TrainedRun& t = trained("configs/iris_mlp.json");
    CommandResult to_file = run_tensorctl("predict --run run --input run/test.csv --output p.csv", t.dir.path());
    CommandResult to_stdout = run_tensorctl("predict --run run --input run/test.csv", t.dir.path());
    REQUIRE(to_file.status == 0);
    REQUIRE(to_stdout.status == 0);
    CHECK(to_stdout.out == read_text(t.dir / "p.csv"));
    fs::remove(t.dir / "p.csv");
  }

  TEST_CASE("predict takes the feature columns in any order and needs no label column") {
    const TrainedRun& t = trained("configs/iris_mlp.json");
    // test.csv is sepal_length,sepal_width,petal_length,petal_width,label: write the features reversed.
    TempDir d;
    std::string reversed;
    for (const auto& line : split_lines(read_text(t.run / "test.csv"))) {
      auto cells = split_cells(line);
      reversed += cells[3] + "," + cells[2] + "," + cells[1] + "," + cells[0] + "\n";
    }
    d.write("reversed.csv", reversed);
    CommandResult shuffled = run_tensorctl("predict --run " + quoted(t.run) + " --input reversed.csv", d.path());
    CommandResult plain =
        run_tensorctl("predict --run " + quoted(t.run) + " --input " + quoted(t.run / "test.csv"), d.path());
    REQUIRE(shuffled.status == 0);
    REQUIRE(plain.status == 0);
    CHECK(shuffled.out == plain.out);
    CHECK(shuffled.err.find("accuracy") == std::string::npos);  // nothing to compare against without labels
  }

  TEST_CASE("predict and evaluate refuse weights holding NaN or infinity, naming the file, tensor and element") {
    const TrainedRun& t = trained("configs/iris_mlp.json");
    for (const auto& [tensor, index, value, shown] :
         std::vector<std::tuple<std::string, std::size_t, float, std::string>>{
             {"dense/kernel", 17, std::numeric_limits<float>::quiet_NaN(), "nan"},
             {"dense_1/bias", 2, -std::numeric_limits<float>::infinity(), "-inf"}}) {
      CAPTURE(tensor);
      TempDir d;
      fs::copy(t.run, d / "run", fs::copy_options::recursive);
      fs::copy(t.run / "test.csv", d / "input.csv");
      set_weight(d / "run/weights.safetensors", tensor, index, value);
      const auto before = d.listing();
      const std::string message =
          "run/weights.safetensors: tensor \"" + tensor + "\": element " + std::to_string(index) + " is " + shown;
      check_runtime_error(run_tensorctl("predict --run run --input input.csv --output predictions.csv", d.path()),
                          {message});
      check_runtime_error(run_tensorctl("evaluate --run run --data input.csv --json", d.path()), {message});
      CHECK(d.listing() == before);
    }
  }

  TEST_CASE("predict and evaluate refuse a row whose scaled features or outputs leave the floats, naming its line") {
    const TrainedRun& t = trained("configs/iris_mlp.json");
    TempDir d;
    fs::copy(t.run, d / "run", fs::copy_options::recursive);
    // 3.4e38 is a float, but scaled by a deviation below 1 it is not: before, the row's probabilities were
    // NaN and it counted as classified right.
    d.write("far.csv", "sepal_length,sepal_width,petal_length,petal_width,label\n1,1,1,1,1\n3.4e38,1,1,1,0\n");
    const std::string scaled =
        "far.csv: line 3: column \"sepal_length\": 3.39999995e+38 lies so far from the "
        "training data (mean ";
    expect_user_error(d, "predict --run run --input far.csv --output p.csv", {scaled});
    expect_user_error(d, "evaluate --run run --data far.csv", {scaled});
    // Finite features, finite weights, and still an output that is not: a weight at the float's edge
    // overflows the first layer's sums.
    set_weight(d / "run/weights.safetensors", "dense/kernel", 0, 3e38f);
    d.write("near.csv", "sepal_length,sepal_width,petal_length,petal_width,label\n5,3,1.5,0.2,0\n7.9,3,6,2,2\n");
    const std::string output = "near.csv: line 3: the model's output 0 for this row is ";
    expect_user_error(d, "predict --run run --input near.csv --output p.csv", {output});
    expect_user_error(d, "evaluate --run run --data near.csv", {output});
  }

  TEST_CASE("predict and evaluate read a run's recorded config as train reads a config: a bad key names summary.json") {
    TempDir d;
    d.write("train.json",
            R"({"model": ")" + source_path("configs/models/iris_mlp.json").string() + R"(", "data": "iris",
    "epochs": 1, "callbacks": [{"type": "ModelCheckpoint"}, {"type": "EarlyStopping"}, {"type": "ReduceLROnPlateau"}]})");
    REQUIRE(run_tensorctl("train train.json --output run --quiet", d.path()).status == 0);
    // Every key the run recorded reads back, each callback's included.
    CHECK(run_tensorctl("predict --run run --input run/test.csv", d.path()).status == 0);
    nlohmann::json summary = read_json(d / "run/summary.json");
    // A run recorded before each callback needed a file of its own (two ModelCheckpoints on one) still loads.
    nlohmann::json twice = summary;
    twice["config"]["callbacks"].push_back(twice["config"]["callbacks"][0]);
    d.write("run/summary.json", twice.dump(2));
    CHECK(run_tensorctl("predict --run run --input run/test.csv", d.path()).status == 0);
    summary["config"]["batch_size"] = -3;
    d.write("run/summary.json", summary.dump(2));
    const std::string message = "run/summary.json: config.batch_size: expected a positive integer, got -3";
    expect_user_error(d, "predict --run run --input run/test.csv", {message});
    expect_user_error(d, "evaluate --run run --data run/test.csv", {message});
  }

  TEST_CASE("predict, evaluate and export refuse a summary.json whose inputs do not fit the model, naming the key") {
    TempDir d;
    REQUIRE(run_tensorctl("train " + quoted(source_path("configs/iris_mlp.json")) + " --epochs 1 --output run --quiet",
                          d.path())
                .status == 0);
    const nlohmann::json original = read_json(d / "run/summary.json");
    auto refused = [&](auto change, const std::string& needle) {
      nlohmann::json summary = original;
      change(summary);
      d.write("run/summary.json", summary.dump(2));
      for (const std::string command :
           {"predict --run run --input run/test.csv", "evaluate --run run --data run/test.csv", "export run -o m.onnx"})
        expect_user_error(d, command, {"run/summary.json: " + needle});
    };
    // Crashed the CSV reader's scaling (an internal check) before: 1 feature name for 4 inputs, and 6 unscaled.
    refused([](auto& j) { j["data"]["feature_names"] = {"sepal_length"}; },
            "data.feature_names: damaged run summary: 1 feature names for a model of 4 inputs");
    refused(
        [](auto& j) {
          j["preprocessing"]["standardize"] = false;
          j["data"]["feature_names"] = std::vector<std::string>(6, "x");
        },
        "data.feature_names: damaged run summary: 6 feature names");
    // Predicted NaN for every row before.
    refused([](auto& j) { j["preprocessing"]["std"][2] = 0; },
            "preprocessing.std[2]: damaged run summary: a scale must be a positive finite number, got 0");
    refused([](auto& j) { j["preprocessing"]["std"][0] = -1; }, "preprocessing.std[0]");
    refused([](auto& j) { j["preprocessing"]["mean"] = {1, 2}; }, "preprocessing: damaged run summary: 2 means");
    // Read a regression target out of bounds in predict (3 outputs, one target per row), and fed evaluate float
    // targets for an int32 placeholder, exit 1 without naming the file.
    refused([](auto& j) { j["data"]["num_classes"] = 0; },
            "data.num_classes: damaged run summary: 0 classes, where a run of loss sparse_categorical_crossentropy on "
            "this model has 1 to 3");
    refused([](auto& j) { j["data"]["num_classes"] = 4; }, "data.num_classes: damaged run summary: 4 classes");
    // An int conversion out of range (undefined; read as -2147483648 here), a fraction read as a whole number,
    // and nlohmann's own messages without a key, before.
    refused([](auto& j) { j["data"]["num_classes"] = 1e39; },
            "data.num_classes: damaged run summary: expected a non-negative integer, got 1e+39");
    refused([](auto& j) { j["data"]["num_classes"] = 2.9; },
            "data.num_classes: damaged run summary: expected a non-negative integer, got 2.9");
    refused([](auto& j) { j["data"]["num_classes"] = "3"; },
            "data.num_classes: damaged run summary: expected a non-negative integer, got \"3\"");
    refused([](auto& j) { j["data"]["num_classes"] = 3000000000LL; },
            "data.num_classes: damaged run summary: 3000000000 classes, more than any model has outputs");
    refused([](auto& j) { j["preprocessing"]["mean"][1] = 1e39; },
            "preprocessing.mean[1]: damaged run summary: expected a number a float holds, got 1e+39");
    refused([](auto& j) { j["data"]["feature_names"][3] = 4; },
            "data.feature_names[3]: damaged run summary: expected a string, got 4");
    refused([](auto& j) { j["preprocessing"]["standardize"] = 1; },
            "preprocessing.standardize: damaged run summary: expected true or false, got 1");
    refused([](auto& j) { j.erase("data"); }, "top level: damaged run summary: missing required key \"data\"");
  }

  TEST_CASE("predict and evaluate refuse a regression run recorded with classes, or with a model of two outputs") {
    TempDir d;
    REQUIRE(run_tensorctl(
                "train " + quoted(source_path("configs/diabetes_regression.json")) + " --epochs 1 --output run --quiet",
                d.path())
                .status == 0);
    auto refused = [&](const std::string& needle) {
      for (const std::string command :
           {"predict --run run --input run/test.csv", "evaluate --run run --data run/test.csv"})
        expect_user_error(d, command, {needle});
    };
    const std::string summary = read_text(d / "run/summary.json");
    nlohmann::json tampered = read_json(d / "run/summary.json");
    tampered["data"]["num_classes"] = 2;
    d.write("run/summary.json", tampered.dump(2));
    refused("run/summary.json: data.num_classes: damaged run summary: 2 classes, where a run of loss mse has none");
    d.write("run/summary.json", summary);
    nlohmann::json model = read_json(d / "run/model.json");
    REQUIRE(model["layers"].back()["units"] == 1);
    model["layers"].back()["units"] = 2;
    d.write("run/model.json", model.dump(2));
    refused(
        "run/model.json: damaged run: the model has 2 outputs, where a run of loss mse (as run/summary.json "
        "records) has one");
  }

  TEST_CASE("a CSV whose labels are names: the run keeps them, predict writes them, evaluate maps them") {
    const TrainedRun& named = trained("configs/iris_species.json");
    const TrainedRun& numbered = trained("configs/iris_mlp.json");
    CHECK(named.summary.at("data").at("classes") == nlohmann::json({"setosa", "versicolor", "virginica"}));
    // The sorted names are the numbered file's classes in order: the same run, bit for bit.
    CHECK(read_text(named.run / "weights.safetensors") == read_text(numbered.run / "weights.safetensors"));
    const auto truth = split_lines(read_text(named.run / "test.csv"));
    REQUIRE(truth[0] == "sepal_length,sepal_width,petal_length,petal_width,species");
    CHECK(split_cells(truth[1]).back() == "versicolor");

    CommandResult r = run_tensorctl("predict --run run --input run/test.csv --keep-columns species", named.dir.path());
    REQUIRE(r.status == 0);
    CommandResult plain = run_tensorctl("predict --run run --input run/test.csv", numbered.dir.path());
    REQUIRE(plain.status == 0);
    const auto lines = split_lines(r.out);
    const auto numbers = split_lines(plain.out);
    REQUIRE(lines.size() == truth.size());
    REQUIRE(numbers.size() == lines.size());
    CHECK(lines[0] == "species,class,setosa,versicolor,virginica");
    const std::vector<std::string> names{"setosa", "versicolor", "virginica"};
    for (std::size_t i = 1; i < lines.size(); ++i) {
      const auto cells = split_cells(lines[i]);
      const auto expected = split_cells(numbers[i]);
      REQUIRE(cells.size() == 5);
      CHECK(cells[0] == split_cells(truth[i]).back());
      CHECK(cells[1] == names[static_cast<std::size_t>(std::stoi(expected[3]))]);
      for (int c = 0; c < 3; ++c)
        CHECK(cells[static_cast<std::size_t>(2 + c)] == expected[static_cast<std::size_t>(c)]);
    }
    CHECK(r.err.find("accuracy: " + four_decimals(test_metric(named, "accuracy")) + " (") != std::string::npos);
    check_evaluate_json(named, "run/test.csv", 30);
    check_evaluate_json(named, quoted(named.config), 30);

    // A name the run does not know is the input's mistake, with its line.
    TempDir d;
    d.write("unknown.csv",
            "petal_width,sepal_length,sepal_width,petal_length,species\n0.2,5.1,3.5,1.4,setosa\n"
            "0.2,5.1,3.5,1.4,\"iris, setosa\"\n");
    expect_user_error(d, "evaluate --run " + quoted(named.run) + " --data unknown.csv",
                      {"unknown.csv: line 3: column \"species\": \"iris, setosa\" is not one of the run's 3 "
                       "classes (setosa, versicolor, virginica)"});
  }

  TEST_CASE("a named-class run whose model has more outputs than classes predicts by number") {
    TempDir d;
    d.write("train.json", R"({"model": {"input_shape": [4], "layers": [{"type": "Dense", "units": 5,
      "activation": "softmax"}]}, "data": {"csv": ")" +
                              source_path("configs/data/iris_species.csv").string() +
                              R"(", "label": "species"}, "epochs": 2})");
    REQUIRE(run_tensorctl("train train.json --quiet --output run", d.path()).status == 0);
    CommandResult r = run_tensorctl("predict --run run --input run/test.csv", d.path());
    REQUIRE(r.status == 0);
    const auto lines = split_lines(r.out);
    REQUIRE(lines.size() == 31);
    CHECK(lines[0] == "prob_0,prob_1,prob_2,prob_3,prob_4,predicted");
    CHECK(split_cells(lines[1]).size() == 6);
  }

  TEST_CASE("predict --keep-columns passes columns through, quoted as needed; other columns are ignored") {
    const TrainedRun& t = trained("configs/iris_mlp.json");
    TempDir d;
    d.write("input.csv",
            "id,comment,sepal_length,sepal_width,petal_length,petal_width\n"
            "\"r1, first\",\"anything, \"\"at all\"\"\",5.1,3.5,1.4,0.2\n"
            "r2,,6.3,3.3,6.0,2.5\n");
    CommandResult r =
        run_tensorctl("predict --run " + quoted(t.run) + " --input input.csv --keep-columns id,sepal_length", d.path());
    REQUIRE(r.status == 0);
    const auto lines = split_lines(r.out);
    REQUIRE(lines.size() == 3);
    CHECK(lines[0] == "id,sepal_length,prob_0,prob_1,prob_2,predicted");
    CHECK(lines[1].starts_with("\"r1, first\",5.1,"));
    CHECK(lines[1].ends_with(",0"));
    CHECK(lines[2].starts_with("r2,6.3,"));
    CHECK(lines[2].ends_with(",2"));
    const auto before = d.listing();
    expect_user_error(d, "predict --run " + quoted(t.run) + " --input input.csv --keep-columns name --output p.csv",
                      {"input.csv: line 1: no column \"name\" to keep (--keep-columns; the columns are id, comment, "
                       "sepal_length, sepal_width, petal_length, petal_width)"});
    // A column twice in the output (kept twice, or kept under a name predict writes) would make a CSV no
    // reader takes.
    d.write("clash.csv", "predicted,sepal_length,sepal_width,petal_length,petal_width\nx,5.1,3.5,1.4,0.2\n");
    expect_user_error(d, "predict --run " + quoted(t.run) + " --input clash.csv --keep-columns predicted",
                      {"--keep-columns: the output would hold the column \"predicted\" twice (kept, and written by"});
    expect_user_error(d, "predict --run " + quoted(t.run) + " --input input.csv --keep-columns id,id",
                      {"--keep-columns: the output would hold the column \"id\" twice"});
    // A kept feature must still be a number.
    d.write("text_feature.csv", "sepal_length,sepal_width,petal_length,petal_width\n5.1,3.5,1.4,wide\n");
    expect_user_error(d, "predict --run " + quoted(t.run) + " --input text_feature.csv --keep-columns petal_width",
                      {"text_feature.csv: line 2: column \"petal_width\": expected a finite number, got \"wide\""});
    CHECK(d.listing().size() == before.size() + 2);
  }

  TEST_CASE("predict on a regression run given the target column reports MAE and MSE as evaluate does") {
    const TrainedRun& t = trained("configs/diabetes_regression.json");
    CommandResult r = run_tensorctl("predict --run run --input run/test.csv", t.dir.path());
    REQUIRE(r.status == 0);
    CHECK(split_lines(r.out)[0] == "value_0");
    CHECK(r.err.find(fmt::format("mae: {} - mse: {} (88 rows with the target \"target\")",
                                 four_decimals(test_metric(t, "mae")), four_decimals(test_metric(t, "mse")))) !=
          std::string::npos);
  }

  TEST_CASE("test.csv holds the test rows exactly: scored again, it gives the test split's figures") {
    TempDir d;
    // Seven significant digits, which %g's six would round (1234561 written as 1.23457e+06), and a target of
    // seven too.
    std::string csv = "a,b,target\n";
    for (int r = 0; r < 40; ++r) csv += fmt::format("{},{},{}\n", 1234561 + r, 0.1 * r, 1634567 + 3 * r);
    d.write("big.csv", csv);
    d.write("c.json", R"({"model": {"input_shape": [2], "layers": [{"type": "Dense", "units": 1}]},
      "data": {"csv": "big.csv", "label": "target", "test_split": 0.5, "validation_split": 0}, "loss": "mse", "metrics": ["mae"],
      "epochs": 1, "seed": 1})");
    REQUIRE(run_tensorctl("train c.json --quiet --output run", d.path()).status == 0);
    CHECK(read_text(d / "run/test.csv").find("e+06") == std::string::npos);
    const nlohmann::json from_config =
        parse_json(run_tensorctl("evaluate --run run --data c.json --json", d.path()).out);
    const nlohmann::json from_file =
        parse_json(run_tensorctl("evaluate --run run --data run/test.csv --json", d.path()).out);
    CHECK(from_file.at("loss") == from_config.at("loss"));
    CHECK(from_file.at("mae") == from_config.at("mae"));
    // predict writes each output as the float it is: 1634570 and not 1.63457e+06.
    const CommandResult p = run_tensorctl("predict --run run --input run/test.csv", d.path());
    REQUIRE(p.status == 0);
    CHECK(p.out.find("e+06") == std::string::npos);
  }

  TEST_CASE("a binary classifier (one sigmoid, binary_crossentropy) predicts prob_1 and 0/1, scored as evaluate does") {
    TempDir d;
    // Class 1 where a + b > 1, with a few rows the other way round.
    std::string csv = "a,b,label\n";
    for (int r = 0; r < 120; ++r) {
      const double a = (r * 37 % 101) / 100.0, b = (r * 53 % 97) / 96.0;
      csv += fmt::format("{},{},{}\n", a, b, (a + b > 1.0) != (r % 17 == 0) ? 1 : 0);
    }
    d.write("d.csv", csv);
    d.write("c.json",
            R"({"model": {"input_shape": [2], "layers": [{"type": "Dense", "units": 1, "activation": "sigmoid"}]},
      "data": {"csv": "d.csv"}, "loss": "binary_crossentropy", "optimizer": {"type": "adam", "learning_rate": 0.05},
      "epochs": 20})");
    REQUIRE(run_tensorctl("train c.json --quiet --output run", d.path()).status == 0);
    CommandResult r = run_tensorctl("predict --run run --input run/test.csv", d.path());
    REQUIRE(r.status == 0);
    const std::vector<std::string> lines = split_lines(r.out);
    REQUIRE(lines.size() == 25);  // the header and round(120 * 0.2) rows
    CHECK(lines[0] == "prob_1,predicted");
    for (std::size_t i = 1; i < lines.size(); ++i) {
      const std::size_t comma = lines[i].find(',');
      REQUIRE(comma != std::string::npos);
      const double p = std::stod(lines[i].substr(0, comma));
      CHECK((p > 0.0 && p < 1.0));
      CHECK(lines[i].substr(comma + 1) == (p > 0.5 ? "1" : "0"));
    }
    const nlohmann::json e = parse_json(run_tensorctl("evaluate --run run --data run/test.csv --json", d.path()).out);
    CHECK(r.err.find(fmt::format("accuracy: {} (", four_decimals(e.at("accuracy").get<double>()))) !=
          std::string::npos);
    CHECK(e.at("accuracy").get<double>() > 0.7);
    // A label outside [0, 1] has no sigmoid output that fits it: refused at its line, in memory or streamed.
    d.write("d.csv", csv + "0.5,0.5,2\n");
    expect_user_error(d, "train c.json --output bad",
                      {"d.csv: line 122: label 2: binary_crossentropy takes targets in [0, 1]"});
    expect_user_error(d, "train c.json --output bad --set data.stream=true",
                      {"c.json: data.csv: d.csv: row 120 (counting from 0) has the target 2; binary_crossentropy"});
  }

  TEST_CASE("a CSV without a header row: columns are numbered, test.csv and predict inputs have none either") {
    const TrainedRun& numbered = trained("configs/iris_mlp.json");
    TempDir d;
    const auto rows = split_lines(read_text(source_path("configs/data/iris.csv")));
    std::string body, features;
    for (std::size_t i = 1; i < rows.size(); ++i) {
      body += rows[i] + "\n";
      if (i <= 3) features += rows[i].substr(0, rows[i].rfind(',')) + "\n";
    }
    d.write("iris.csv", body);
    d.write("features.csv", features);
    d.write("train.json", R"({"model": ")" + source_path("configs/models/iris_mlp.json").string() +
                              R"(", "data": {"csv": "iris.csv", "label": "5", "header": false},
      "loss": "sparse_categorical_crossentropy", "optimizer": {"type": "adam", "learning_rate": 0.005},
      "metrics": ["accuracy"], "epochs": 150, "batch_size": 16, "seed": 7})");
    REQUIRE(run_tensorctl("train train.json --quiet --output run", d.path()).status == 0);
    CHECK(read_text(d / "run/weights.safetensors") == read_text(numbered.run / "weights.safetensors"));
    const nlohmann::json summary = read_json(d / "run/summary.json");
    CHECK(summary.at("data").at("feature_names") == nlohmann::json({"1", "2", "3", "4"}));
    CHECK(summary.at("config").at("data").at("header") == false);
    CHECK(split_lines(read_text(d / "run/test.csv"))[0] == "6.1,2.8,4,1.3,1");
    check_evaluate_json(numbered, "run/test.csv", 30);
    CommandResult all = run_tensorctl("evaluate --run run --data run/test.csv", d.path());
    REQUIRE(all.status == 0);
    CHECK(all.out.find("accuracy: " + four_decimals(test_metric(numbered, "accuracy"))) != std::string::npos);
    // The features alone, in order, also do.
    CommandResult r = run_tensorctl("predict --run run --input features.csv", d.path());
    REQUIRE(r.status == 0);
    const auto lines = split_lines(r.out);
    REQUIRE(lines.size() == 4);
    CHECK(lines[0] == "prob_0,prob_1,prob_2,predicted");
    CHECK(lines[1].ends_with(",0"));
    // Without names a sixth column cannot be told from a shifted feature: refused, unless it is kept.
    std::string wider;
    for (const auto& row : split_lines(read_text(d / "run/test.csv"))) wider += row + ",7\n";
    d.write("wider.csv", wider);
    check_user_error(run_tensorctl("predict --run run --input wider.csv", d.path()),
                     {"wider.csv: line 1: 6 cells, but a row without a header holds the model's 4 features, in order, "
                      "and at most the label as column 5; column 6 is neither (or keep it with --keep-columns 6)"});
    check_user_error(run_tensorctl("evaluate --run run --data wider.csv", d.path()), {"column 6 is neither"});
    r = run_tensorctl("predict --run run --input wider.csv --keep-columns 6", d.path());
    REQUIRE(r.status == 0);
    CHECK(split_lines(r.out)[1].starts_with("7,"));
  }

  TEST_CASE("predict and evaluate take --weights from the run, and work on an interrupted run") {
    TempDir d;
    d.write("train.json", R"({"model": ")" + source_path("configs/models/iris_mlp.json").string() +
                              R"(", "data": "iris", "epochs": 6, "seed": 3, "optimizer": {"type": "sgd",
      "learning_rate": 0.5}, "callbacks": [{"type": "ModelCheckpoint", "monitor": "val_loss"}]})");
    REQUIRE(run_tensorctl("train train.json --quiet --output run", d.path()).status == 0);
    auto predict = [&](const std::string& extra) {
      CommandResult r = run_tensorctl("predict --run run --input run/test.csv" + extra, d.path());
      REQUIRE(r.status == 0);
      return r.out;
    };
    const std::string final_weights = predict("");
    CHECK(predict(" --weights weights.safetensors") == final_weights);
    // The checkpoint after the last epoch holds the final weights (and the optimizer's state, ignored).
    CHECK(predict(" --weights checkpoint.safetensors") == final_weights);
    CHECK(predict(" --weights " + quoted(fs::absolute(d / "run/checkpoint.safetensors"))) == final_weights);
    const std::string best = predict(" --weights best.safetensors");
    CHECK(split_lines(best).size() == split_lines(final_weights).size());
    CommandResult e =
        run_tensorctl("evaluate --run run --data run/test.csv --weights best.safetensors --json", d.path());
    REQUIRE(e.status == 0);
    CHECK(parse_json(e.out).at("weights") == (fs::path("run") / "best.safetensors").string());
    expect_user_error(d, "predict --run run --input run/test.csv --weights nope.safetensors",
                      {"run/nope.safetensors: cannot open file: No such file or directory (--weights is relative to "
                       "the run directory)"});
    expect_user_error(d, "predict --run run --input run/test.csv --weights model.json", {"run/model.json"});

    // Interrupted: model.json and the checkpoint, no summary or final weights. The scaling is recomputed.
    fs::copy_file(d / "run/test.csv", d / "test.csv");
    fs::remove(d / "run/summary.json");
    fs::remove(d / "run/weights.safetensors");
    CommandResult r = run_tensorctl("predict --run run --input test.csv", d.path());
    REQUIRE(r.status == 0);
    CHECK(r.out == final_weights);
    CHECK(run_tensorctl("evaluate --run run --data test.csv", d.path()).status == 0);
    fs::remove(d / "run/checkpoint.safetensors");
    expect_user_error(d, "predict --run run --input test.csv",
                      {"run: not a run directory: summary.json (a finished run) and checkpoint.safetensors (an "
                       "interrupted one) are both missing"});
    fs::remove(d / "run/model.json");
    expect_user_error(d, "predict --run run --input test.csv", {"run: not a run directory: model.json is missing"});
  }

  TEST_CASE("an interrupted run's checkpoint keeps its input scaling: predict ignores a later change to the data") {
    TempDir d;
    const std::string wine = read_text(source_path("configs/data/wine.csv"));
    d.write("mywine.csv", wine);
    d.write("w.json", R"({"model": ")" + source_path("configs/models/wine_mlp.json").string() +
                          R"(", "data": {"csv": "mywine.csv"}, "epochs": 2})");
    REQUIRE(run_tensorctl("train w.json --quiet --output run", d.path()).status == 0);
    fs::copy_file(d / "run/test.csv", d / "test.csv");
    auto predict = [&] {
      CommandResult r = run_tensorctl("predict --run run --input test.csv", d.path());
      REQUIRE(r.status == 0);
      return r.out;
    };
    const std::string finished = predict();
    // Interrupted, then the data file rewritten: the scaling the run learnt came from the old rows.
    fs::remove(d / "run/summary.json");
    fs::remove(d / "run/weights.safetensors");
    const std::vector<std::string> lines = split_lines(wine);
    std::string head;
    for (std::size_t i = 0; i < 60; ++i) head += lines[i] + "\n";
    d.write("mywine.csv", head);
    CHECK(predict() == finished);
    CHECK(run_tensorctl("evaluate --run run --data test.csv", d.path()).status == 0);
    // Without the data file at all.
    fs::remove(d / "mywine.csv");
    CHECK(predict() == finished);
    // A checkpoint written before the scaling was recorded recomputes it from the data, as it was.
    d.write("mywine.csv", wine);
    SafetensorsFile file = load_safetensors(d / "run/checkpoint.safetensors");
    REQUIRE(file.metadata.erase("inputs") == 1);
    save_safetensors(d / "run/checkpoint.safetensors", file.tensors, file.metadata);
    CHECK(predict() == finished);
    // A tampered record names the checkpoint and the key.
    file.metadata["inputs"] = R"({"data": {"feature_names": ["a"], "label": "label", "num_classes": 3},
                                  "preprocessing": {"standardize": false, "mean": [], "std": []}})";
    save_safetensors(d / "run/checkpoint.safetensors", file.tensors, file.metadata);
    expect_user_error(d, "predict --run run --input test.csv",
                      {"run/checkpoint.safetensors: __metadata__.inputs.data.feature_names: damaged training state: 1 "
                       "feature names for a model of 13 inputs"});
  }

  TEST_CASE("predict --input - reads standard input, and a stream whose header is wrong is refused at once") {
    const TrainedRun& t = trained("configs/iris_mlp.json");
    const std::string binary = quoted(TENSORCTL_BINARY);
    const CommandResult file = run_tensorctl("predict --run run --input run/test.csv", t.dir.path());
    REQUIRE(file.status == 0);
    // "-" was refused as a file that does not exist, while --output - meant standard output.
    const CommandResult piped =
        run_shell_command(binary + " predict --run run --input - < run/test.csv 2>/dev/null", t.dir.path());
    CHECK(piped.status == 0);
    CHECK(piped.out == file.out);
    // `yes 1` never ends: its header ("1") names none of the features, which used to be found only once the
    // stream had filled the size limit (6 GB read, 8.5 GB resident, 47 s). `timeout` ends a reader that hangs.
    const CommandResult endless = run_shell_command(
        "yes 1 | TENSORCTL_MEMORY_LIMIT=400M timeout 60 " + binary + " predict --run run --input -", t.dir.path());
    check_user_error_in_output(endless, {});
    CHECK(endless.out ==
          "error: -: line 1: missing column \"sepal_length\" (the model was trained on: "
          "sepal_length, sepal_width, petal_length, petal_width)\n");
  }

  TEST_CASE("a closed standard output ends predict quietly with 141, as coreutils' tools end") {
    const TrainedRun& t = trained("configs/digits_mlp.json");
    // `true` reads nothing: the predictions (1,440 rows of 10 probabilities, over 64 KB) fill the pipe, and the
    // write fails once it has gone, whatever the timing.
    const std::vector<std::string> rows = split_lines(read_text(t.run / "test.csv"));
    std::string big = rows[0] + "\n";
    for (int copy = 0; copy < 4; ++copy)
      for (std::size_t i = 1; i < rows.size(); ++i) big += rows[i] + "\n";
    std::ofstream(t.dir / "big.csv") << big;
    const CommandResult r = run_shell_command(
        "(" + quoted(TENSORCTL_BINARY) + " predict --run run --input big.csv 2>err.txt; echo $? >status.txt) | true",
        t.dir.path());
    CHECK(r.status == 0);
    // Its accuracy on stderr, and no error.
    CHECK(read_text(t.dir / "err.txt").starts_with("accuracy: "));
    CHECK(read_text(t.dir / "err.txt").find("error") == std::string::npos);
    CHECK(read_text(t.dir / "status.txt") == "141\n");
    for (const char* name : {"err.txt", "status.txt", "big.csv"}) fs::remove(t.dir / name);
  }

  TEST_CASE("--version prints the version") {
    TempDir d;
    CommandResult r = run_tensorctl("--version", d.path());
    CHECK(r.status == 0);
    CHECK(r.out.starts_with("tensorctl "));
    CHECK(split_lines(r.out).size() == 1);
  }

  TEST_CASE("cuBLAS is not loaded at start: a CPU run does not pay for it") {
    // Linked, libcublas and libcublasLt were loaded by every command: `tensorctl --version` took 229 MB
    // resident, now 13 MB (docs/devices.md, "CUDA"). The dynamic loader lists what a start would load.
    TempDir d;
    const CommandResult r =
        run_shell_command("LD_TRACE_LOADED_OBJECTS=1 " + quoted(TENSORCTL_BINARY) + " --version", d.path());
    REQUIRE(r.status == 0);
    CHECK(r.out.find("libc.so") != std::string::npos);  // the listing is there
    CHECK(r.out.find("libcublas") == std::string::npos);
  }

  TEST_CASE("--help exits 0 for the program and every command") {
    TempDir d;
    CommandResult top = run_tensorctl("--help", d.path());
    CHECK(top.status == 0);
    for (const char* command : {"train", "predict", "evaluate", "summary"}) {
      CAPTURE(command);
      CHECK(top.out.find(command) != std::string::npos);
      CommandResult r = run_tensorctl(std::string(command) + " --help", d.path());
      CHECK(r.status == 0);
      CHECK(r.out.find(std::string("Usage: tensorctl ") + command) != std::string::npos);
      CHECK(r.err.empty());
    }
    CHECK(d.listing().empty());
  }

}  // TEST_SUITE

}  // namespace tctl::cli_test
