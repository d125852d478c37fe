// tensorctl evaluate and predict on a saved run reproduce what train reported, and their outputs have the
// documented shape; --version and --help work for every command.
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <tuple>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "cli/cli_test_util.h"

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

void check_evaluate_json(const TrainedRun& t, const std::string& data, std::int64_t rows) {
  CommandResult r = run_tensorctl("evaluate --run run --data " + data + " --json", t.dir.path());
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

  TEST_CASE("evaluate --data RUN/test.csv reproduces train's test accuracy") {
    for (const char* config : {"configs/digits_mlp.json", "configs/iris_mlp.json"}) {
      CAPTURE(config);
      const TrainedRun& t = trained(config);
      check_evaluate_json(t, "run/test.csv", t.summary.at("rows").at("test").get<std::int64_t>());
    }
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

  TEST_CASE("predict and evaluate read a run's recorded config as train reads a config: a bad key names summary.json") {
    TempDir d;
    d.write("train.json",
            R"({"model": ")" + source_path("configs/models/iris_mlp.json").string() + R"(", "data": "iris",
    "epochs": 1, "callbacks": [{"type": "ModelCheckpoint"}, {"type": "EarlyStopping"}, {"type": "ReduceLROnPlateau"}]})");
    REQUIRE(run_tensorctl("train train.json --output run --quiet", d.path()).status == 0);
    // Every key the run recorded reads back, each callback's included.
    CHECK(run_tensorctl("predict --run run --input run/test.csv", d.path()).status == 0);
    nlohmann::json summary = read_json(d / "run/summary.json");
    summary["config"]["batch_size"] = -3;
    d.write("run/summary.json", summary.dump(2));
    const std::string message = "run/summary.json: config.batch_size: expected a positive integer, got -3";
    expect_user_error(d, "predict --run run --input run/test.csv", {message});
    expect_user_error(d, "evaluate --run run --data run/test.csv", {message});
  }

  TEST_CASE("--version prints the version") {
    TempDir d;
    CommandResult r = run_tensorctl("--version", d.path());
    CHECK(r.status == 0);
    CHECK(r.out.starts_with("tensorctl "));
    CHECK(split_lines(r.out).size() == 1);
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
