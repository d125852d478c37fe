// The shipped sequence configs end to end (configs/bigrams_conv1d.json: Embedding, Conv1D, GlobalMaxPooling1D;
// configs/bigrams_lstm.json: Embedding, Bidirectional LSTM; configs/bigrams_transformer.json:
// TokenAndPositionEmbedding, TransformerEncoder), and token ids that are no ids refused as bad
// input, naming the place.
#include <fstream>

#include <doctest/doctest.h>

#include "array_files.h"
#include "cli/cli_test_util.h"

namespace tctl::cli_test {
namespace {

// bigrams.csv's first rows without their label, one cell changed to `bad` (column t4 of the second row).
std::string rows_with(const std::string& bad) {
  std::ifstream in(source_path("configs/data/bigrams.csv"));
  std::string line, out;
  for (int i = 0; i < 3 && std::getline(in, line); ++i) {
    std::vector<std::string> cells = split_cells(line);
    cells.pop_back();  // the label
    if (i == 2) cells[4] = bad;
    for (std::size_t c = 0; c < cells.size(); ++c) out += (c ? "," : "") + cells[c];
    out += "\n";
  }
  return out;
}

}  // namespace

TEST_SUITE("sequence models") {
  TEST_CASE("configs/bigrams_conv1d.json reaches test accuracy >= 0.98; summary, predict, export follow") {
    TempDir d;
    CommandResult r =
        run_tensorctl("train " + quoted(source_path("configs/bigrams_conv1d.json")) + " --json --output run", d.path());
    REQUIRE(r.status == 0);
    const nlohmann::json saved = read_json(d / "run/summary.json");
    CHECK(saved.at("test").at("accuracy").get<double>() >= 0.98);
    CHECK(saved.at("rows").at("test") == 600);
    // Keras' parameter counts: 30 * 16, 2 * 16 * 32 + 32, 32 * 3 + 3.
    CommandResult s = run_tensorctl("summary " + quoted(source_path("configs/bigrams_conv1d.json")), d.path());
    REQUIRE(s.status == 0);
    for (const char* row : {"embedding (Embedding)", "(None, 24, 16)", "480", "conv1d (Conv1D)", "(None, 23, 32)",
                            "1,056", "global_max_pooling1d (GlobalMaxPooling1D)", "Total params: 1,635"})
      CHECK_MESSAGE(s.out.find(row) != std::string::npos, row);
    { std::ofstream(d / "ok.csv") << rows_with("7"); }
    CommandResult p = run_tensorctl("predict --run run --input ok.csv", d.path());
    REQUIRE(p.status == 0);
    CHECK(split_lines(p.out).size() == 3);  // header and two rows
    CHECK(run_tensorctl("export run --output m.onnx", d.path()).status == 0);

    for (const std::string bad : {"30", "2.5", "-1"}) {
      CAPTURE(bad);
      std::ofstream(d / "bad.csv") << rows_with(bad);
      check_user_error(
          run_tensorctl("predict --run run --input bad.csv --output out.csv", d.path()),
          {"bad.csv: line 3: column \"t4\": " + bad + " is not a token id of embedding", "a whole number in [0, 30)"});
      CHECK(!std::filesystem::exists(d / "out.csv"));
    }
  }

  TEST_CASE("configs/bigrams_lstm.json reaches test accuracy >= 0.98; summary, evaluate, profile follow") {
    TempDir d;
    const std::string config = quoted(source_path("configs/bigrams_lstm.json"));
    CommandResult r = run_tensorctl("train " + config + " --json --output run", d.path());
    REQUIRE(r.status == 0);
    const nlohmann::json saved = read_json(d / "run/summary.json");
    CHECK(saved.at("test").at("accuracy").get<double>() >= 0.98);
    // Keras' parameter counts: 30 x 16; two LSTMs of 4 (16 x 16 + 16 x 16 + 16); 32 x 3 + 3.
    CommandResult s = run_tensorctl("summary " + config, d.path());
    REQUIRE(s.status == 0);
    for (const char* row : {"bidirectional (Bidirectional)", "(None, 32)", "4,224", "Total params: 4,803"})
      CHECK_MESSAGE(s.out.find(row) != std::string::npos, row);
    CommandResult e = run_tensorctl("evaluate --run run --data " + config + " --json", d.path());
    REQUIRE(e.status == 0);
    CHECK(parse_json(e.out).at("accuracy").get<double>() >= 0.98);
    // The profile breaks the layer into its recurrent ops, forward and back.
    CommandResult p = run_tensorctl("profile " + config + " --iterations 2 --warmup 1 --ops --json", d.path());
    REQUIRE(p.status == 0);
    CHECK(p.out.find("\"Recurrence\"") != std::string::npos);
    CHECK(p.out.find("\"RecurrenceGrad\"") != std::string::npos);
  }

  TEST_CASE("configs/bigrams_transformer.json reaches test accuracy >= 0.98, with KerasHub's parameter count") {
    TempDir d;
    const std::string config = quoted(source_path("configs/bigrams_transformer.json"));
    CommandResult r = run_tensorctl("train " + config + " --json --output run", d.path());
    REQUIRE(r.status == 0);
    CHECK(read_json(d / "run/summary.json").at("test").at("accuracy").get<double>() >= 0.98);
    // KerasHub: 4 (32 x 32 + 32) attention, 2 x 2 x 32 normalizations, 32 x 32 + 32 twice feedforward.
    CommandResult s = run_tensorctl("summary " + config, d.path());
    REQUIRE(s.status == 0);
    for (const char* row :
         {"transformer_encoder (TransformerEncoder)", "(None, 24, 32)", "6,464", "Total params: 8,291"})
      CHECK_MESSAGE(s.out.find(row) != std::string::npos, row);
  }

  TEST_CASE("a sequence config whose data standardizes or holds a bad id is refused before training") {
    TempDir d;
    std::filesystem::create_directories(d / "models");
    std::filesystem::copy_file(source_path("configs/models/bigrams_conv1d.json"), d / "models/bigrams_conv1d.json");
    {
      std::ofstream(d / "ids.csv") << "t0,t1,t2,label\n1,2,3,0\n4,5,6,1\n7,8,40,2\n1,1,1,0\n2,2,2,1\n";
      std::ofstream(d / "model.json")
          << R"({"input_shape": [3], "layers": [{"type": "Embedding", "input_dim": 30, "output_dim": 4},
               {"type": "GlobalAveragePooling1D"}, {"type": "Dense", "units": 3, "activation": "softmax"}]})";
      std::ofstream(d / "scaled.json") << R"({"model": "model.json", "data": {"csv": "ids.csv"}, "epochs": 1})";
      std::ofstream(d / "plain.json")
          << R"({"model": "model.json", "data": {"csv": "ids.csv", "standardize": false}, "epochs": 1})";
    }
    check_user_error(run_tensorctl("train scaled.json --output run", d.path()),
                     {"scaled.json: data.standardize: the model's Embedding \"embedding\" (model.json layers[0]) "
                      "takes token ids, which scaling would turn into fractions: set \"standardize\": false"});
    check_user_error(run_tensorctl("train plain.json --output run", d.path()),
                     {"plain.json: data.csv: ids.csv, line 4: column \"t2\": 40 is not a token id of embedding"});
    CHECK(!std::filesystem::exists(d / "run"));
    // Ids reach an Embedding after a Reshape unchanged, so they are checked as for one first; in an array the
    // row counts from 0, as predict counts it.
    std::ofstream(d / "reshaped.json")
        << R"({"input_shape": [3], "layers": [{"type": "Reshape", "target_shape": [3, 1]}, {"type": "Flatten"},
             {"type": "Embedding", "input_dim": 30, "output_dim": 4},
             {"type": "GlobalAveragePooling1D"}, {"type": "Dense", "units": 3, "activation": "softmax"}]})";
    d.write("x.npy", testing::npy("<f4", "(5, 3)",
                                  testing::raw(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 40, 1, 1, 1, 2, 2, 2})));
    d.write("y.npy", testing::npy("<i8", "(5,)", testing::raw(std::vector<std::int64_t>{0, 1, 2, 0, 1})));
    std::ofstream(d / "arrays.json") << R"({"model": "reshaped.json", "data": {"x": "x.npy", "y": "y.npy"}})";
    check_user_error(run_tensorctl("train arrays.json --output run", d.path()),
                     {"arrays.json: data.standardize: the model's Embedding \"embedding\" (reshaped.json layers[2])"});
    std::ofstream(d / "arrays.json")
        << R"({"model": "reshaped.json", "data": {"x": "x.npy", "y": "y.npy", "standardize": false}})";
    check_user_error(run_tensorctl("train arrays.json --output run", d.path()),
                     {"arrays.json: data.x: x.npy, row 2: column \"x2\": 40 is not a token id of embedding"});
    CHECK(!std::filesystem::exists(d / "run"));
  }
}

}  // namespace tctl::cli_test
