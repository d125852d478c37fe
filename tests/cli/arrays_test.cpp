// Arrays as a config's data end to end: the digits written out as a .npy file of features and an IDX file of
// labels train the digits MLP; evaluate reads the config's test split from them again and the run's test rows,
// and predict those and the array itself; a mismatch between the two
// files, and a file that is neither format, are one line naming the place, exit 2, nothing written.
#include <fstream>
#include <sstream>

#include <doctest/doctest.h>

#include "array_files.h"
#include "cli/cli_test_util.h"

namespace tctl::cli_test {
namespace {

// configs/data/digits.csv as a [rows, 8, 8] float32 .npy file and a [rows] uint8 IDX file.
void write_digits(const TempDir& d, std::size_t rows) {
  std::ifstream in(source_path("configs/data/digits.csv"));
  std::string line;
  std::getline(in, line);  // the header
  std::vector<float> x;
  std::string labels;
  for (std::size_t r = 0; r < rows && std::getline(in, line); ++r) {
    std::vector<std::string> cells = split_cells(line);
    labels += static_cast<char>(std::stoi(cells.back()));
    cells.pop_back();
    for (const auto& c : cells) x.push_back(std::stof(c));
  }
  const std::size_t n = labels.size();
  d.write("digits_x.npy", testing::npy("<f4", "(" + std::to_string(n) + ", 8, 8)", testing::raw(x)));
  d.write("digits_y.idx1", testing::idx(0x08, {static_cast<std::uint32_t>(n)}, labels));
}

const char* kConfig = R"({"model": "MODEL", "data": {"x": "digits_x.npy", "y": "LABELS"}, "epochs": 8,
                         "batch_size": 32, "seed": 3})";

std::string config(const std::string& labels) {
  std::string c = kConfig;
  c.replace(c.find("MODEL"), 5, source_path("configs/models/digits_mlp.json"));
  c.replace(c.find("LABELS"), 6, labels);
  return c;
}

}  // namespace

TEST_SUITE("arrays") {
  TEST_CASE("the digits as a .npy file and an IDX file train the digits MLP; evaluate and predict follow") {
    TempDir d;
    write_digits(d, 1797);
    d.write("config.json", config("digits_y.idx1"));
    CommandResult r = run_tensorctl("train config.json --json --output run", d.path());
    REQUIRE_MESSAGE(r.status == 0, r.err);
    const nlohmann::json saved = read_json(d / "run/summary.json");
    CHECK(saved.at("test").at("accuracy").get<double>() >= 0.9);
    CHECK(saved.at("rows").at("test") == 359);
    // The config's own test split, read from the arrays again, and the run's test rows as CSV agree.
    CommandResult e = run_tensorctl("evaluate --run run --data config.json --json", d.path());
    REQUIRE_MESSAGE(e.status == 0, e.err);
    CommandResult csv = run_tensorctl("evaluate --run run --data run/test.csv --json", d.path());
    REQUIRE_MESSAGE(csv.status == 0, csv.err);
    const double accuracy = nlohmann::json::parse(e.out).at("accuracy").get<double>();
    CHECK(accuracy == doctest::Approx(saved.at("test").at("accuracy").get<double>()));
    CHECK(nlohmann::json::parse(csv.out).at("accuracy").get<double>() == doctest::Approx(accuracy));
    CommandResult p = run_tensorctl("predict --run run --input run/test.csv", d.path());
    REQUIRE_MESSAGE(p.status == 0, p.err);
    CHECK(split_lines(p.out).size() == 360);  // header and the test rows
    // The array itself, every row of it: the run's scaling applies, and the classes come out as for a CSV.
    CommandResult a = run_tensorctl("predict --run run --input digits_x.npy --output all.csv", d.path());
    REQUIRE_MESSAGE(a.status == 0, a.err);
    const std::vector<std::string> lines = split_lines(read_text(d / "all.csv"));
    REQUIRE(lines.size() == 1798);
    int right = 0;
    std::ifstream labels(source_path("configs/data/digits.csv"));
    std::string line;
    std::getline(labels, line);
    for (std::size_t r = 1; r < lines.size() && std::getline(labels, line); ++r)
      right += split_cells(lines[r]).back() == split_cells(line).back();
    CHECK(right > 1797 * 9 / 10);
    d.write("narrow.npy", testing::npy("<f4", "(2, 63)", std::string(2 * 63 * 4, '\0')));
    expect_user_error(d, "predict --run run --input narrow.npy",
                      {"narrow.npy: header: rows of 63 elements (shape (2, 63)), but the model takes 64 features"});
  }

  TEST_CASE("a .npz file of MNIST's layout: x_key and y_key pick its arrays; predict takes a one-array .npz") {
    TempDir d;
    if (run_shell_command("/usr/bin/python3 -c 'import numpy'", d.path()).status != 0) {
      MESSAGE("/usr/bin/python3 has no numpy: .npz files are not written here");
      return;
    }
    const CommandResult made = run_shell_command(
        "/usr/bin/python3 -c \"import numpy as np; r = np.loadtxt('" + source_path("configs/data/digits.csv").string() +
            "', delimiter=',', skiprows=1); np.savez_compressed('digits.npz', x_train=r[:, :64].reshape(-1, 8, 8)"
            ".astype('uint8'), y_train=r[:, 64].astype('uint8')); np.savez('rows.npz', r[:7, :64])\"",
        d.path());
    REQUIRE_MESSAGE(made.status == 0, made.out);
    d.write("config.json", R"({"model": ")" + source_path("configs/models/digits_mlp.json").string() +
                               R"(", "data": {"x": "digits.npz", "y": "digits.npz", "x_key": "x_train",
                               "y_key": "y_train"}, "epochs": 8, "seed": 3})");
    CommandResult r = run_tensorctl("train config.json --quiet --output run", d.path());
    REQUIRE_MESSAGE(r.status == 0, r.err);
    CHECK(read_json(d / "run/summary.json").at("test").at("accuracy").get<double>() >= 0.9);
    CHECK(read_json(d / "run/summary.json").at("config").at("data").at("x_key") == "x_train");
    CommandResult p = run_tensorctl("predict --run run --input rows.npz", d.path());
    REQUIRE_MESSAGE(p.status == 0, p.err);
    CHECK(split_lines(p.out).size() == 8);
    d.write("config.json", R"({"model": ")" + source_path("configs/models/digits_mlp.json").string() +
                               R"(", "data": {"x": "digits.npz", "y": "digits.npz"}})");
    expect_user_error(d, "train config.json --output run2",
                      {"digits.npz: a .npz file of 2 arrays (x_train, y_train): name the one to read"});
  }

  TEST_CASE("a regression on [N, 3] targets: its run predicts and evaluates, its test.csv names the targets") {
    // y = a fixed linear map of x: three targets a row, one output each.
    TempDir d;
    const std::size_t n = 200;
    std::vector<float> x, y;
    for (std::size_t r = 0; r < n; ++r) {
      float row[4];
      for (std::size_t j = 0; j < 4; ++j) row[j] = static_cast<float>((r * 7 + j * 13) % 17) / 17.0f - 0.5f;
      x.insert(x.end(), row, row + 4);
      y.insert(y.end(), {row[0] + row[1], row[2] - row[3], 0.5f * row[0]});
    }
    d.write("x.npy", testing::npy("<f4", "(200, 4)", testing::raw(x)));
    d.write("y.npy", testing::npy("<f4", "(200, 3)", testing::raw(y)));
    d.write("config.json", R"({"model": {"input_shape": [4], "layers": [{"type": "Dense", "units": 3}]},
        "data": {"x": "x.npy", "y": "y.npy"}, "loss": "mse", "epochs": 2, "batch_size": 16, "seed": 1})");
    CommandResult r = run_tensorctl("train config.json --json --output run", d.path());
    REQUIRE_MESSAGE(r.status == 0, r.err);
    const nlohmann::json saved = read_json(d / "run/summary.json");
    CHECK(saved.at("data").at("targets") == 3);
    CHECK(split_lines(read_text(d / "run/test.csv"))[0] == "x0,x1,x2,x3,label_0,label_1,label_2");
    // The run's test rows, by the CSV and by the config's split, give the test loss train reported.
    for (const char* data : {"run/test.csv", "config.json"}) {
      CAPTURE(data);
      CommandResult e = run_tensorctl(std::string("evaluate --run run --json --data ") + data, d.path());
      REQUIRE_MESSAGE(e.status == 0, e.err);
      CHECK(nlohmann::json::parse(e.out).at("loss").get<double>() ==
            doctest::Approx(saved.at("test").at("loss").get<double>()));
    }
    CommandResult p = run_tensorctl("predict --run run --input run/test.csv", d.path());
    REQUIRE_MESSAGE(p.status == 0, p.err);
    CHECK(split_lines(p.out)[0] == "value_0,value_1,value_2");
    CHECK(p.err.find("with the 3 targets label_0 to label_2") != std::string::npos);
    // A summary whose targets disagree with the model is a damaged run.
    nlohmann::json tampered = saved;
    tampered["data"]["targets"] = 2;
    d.write("run/summary.json", tampered.dump());
    CommandResult bad = run_tensorctl("predict --run run --input x.npy", d.path());
    CHECK(bad.status == 2);
    CHECK(bad.err.find("the model has 3 outputs, where a run of loss mse") != std::string::npos);
  }

  TEST_CASE("a regression per step: Dense on an LSTM's sequence, [N, 6] targets, learns the running sum") {
    TempDir d;
    const std::size_t n = 240, steps = 6;
    std::vector<float> x, y;
    for (std::size_t r = 0; r < n; ++r) {
      float sum = 0.0f;
      for (std::size_t t = 0; t < steps; ++t) {
        const float v = static_cast<float>((r * 5 + t * 11) % 13) / 13.0f;
        x.push_back(v);
        y.push_back(sum += v);
      }
    }
    d.write("x.npy", testing::npy("<f4", "(240, 6, 1)", testing::raw(x)));
    d.write("y.npy", testing::npy("<f4", "(240, 6)", testing::raw(y)));
    d.write("config.json", R"({"model": {"input_shape": [6, 1], "layers": [
        {"type": "LSTM", "units": 8, "return_sequences": true}, {"type": "Dense", "units": 1}]},
        "data": {"x": "x.npy", "y": "y.npy"}, "loss": "mse", "epochs": 20, "batch_size": 16, "seed": 1,
        "optimizer": {"type": "adam", "learning_rate": 0.02}})");
    CommandResult r = run_tensorctl("train config.json --json --output run", d.path());
    REQUIRE_MESSAGE(r.status == 0, r.err);
    const nlohmann::json saved = read_json(d / "run/summary.json");
    CHECK(saved.at("data").at("targets") == 6);
    // The targets' variance is about 0.9; predicting their mean would leave that much.
    CHECK(saved.at("test").at("loss").get<double>() < 0.1);
    CommandResult e = run_tensorctl("evaluate --run run --json --data run/test.csv", d.path());
    REQUIRE_MESSAGE(e.status == 0, e.err);
    CHECK(nlohmann::json::parse(e.out).at("loss").get<double>() ==
          doctest::Approx(saved.at("test").at("loss").get<double>()));
    CommandResult p = run_tensorctl("predict --run run --input run/test.csv", d.path());
    REQUIRE_MESSAGE(p.status == 0, p.err);
    CHECK(split_lines(p.out)[0] == "value_0,value_1,value_2,value_3,value_4,value_5");
  }

  TEST_CASE("arrays that disagree, or a file that is no array, are refused naming the place") {
    TempDir d;
    write_digits(d, 40);
    d.write("short_y.npy", testing::npy("|u1", "(10,)", std::string(10, '\1')));
    d.write("config.json", config("short_y.npy"));
    expect_user_error(d, "train config.json --output run", {"config.json: data: x (", "has 40 rows, y (", "has 10"});
    // Labels the model has no output for are the y file's fault: named as data.y and that file.
    d.write("big_y.npy", testing::npy("|u1", "(40,)", std::string(40, '\x0c')));
    d.write("config.json", config("big_y.npy"));
    expect_user_error(d, "train config.json --output run",
                      {"config.json: data.y: big_y.npy has labels 0..12, but the model's last layer"});
    d.write("text_y.npy", "0\n1\n");
    d.write("config.json", config("text_y.npy"));
    expect_user_error(d, "train config.json --output run", {"text_y.npy: header: neither a NumPy .npy or .npz file"});
    d.write("config.json", R"({"model": "m.json", "data": {"x": "digits_x.npy"}})");
    d.write("m.json", R"({"input_shape": [64], "layers": [{"type": "Dense", "units": 10}]})");
    expect_user_error(d, "train config.json --output run", {"config.json: data: \"x\" needs \"y\""});
    d.write("config.json", R"({"model": "m.json", "data": {"x": "digits_x.npy", "y": "y.npy", "csv": "d.csv"}})");
    expect_user_error(
        d, "train config.json --output run",
        {"config.json: data: give exactly one of \"dataset\", \"csv\", \"x\" (with \"y\") or \"images\""});
  }
}

}  // namespace tctl::cli_test
