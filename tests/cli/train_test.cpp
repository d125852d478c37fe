// tensorctl train end to end: the acceptance accuracies of the shipped configs, the run directory it writes,
// and results that do not depend on the thread counts.
#include <cstdint>
#include <cstring>
#include <optional>

#include <doctest/doctest.h>

#include "cli/cli_test_util.h"

namespace tctl::cli_test {
namespace {

namespace fs = std::filesystem;

// history.csv without its timing column: the numbers that must not depend on threads.
std::vector<std::vector<std::string>> history_without_seconds(const fs::path& run) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& line : split_lines(read_text(run / "history.csv"))) {
    auto cells = split_cells(line);
    REQUIRE(cells.back() != "");
    cells.pop_back();  // seconds
    rows.push_back(cells);
  }
  return rows;
}

// The metric part of each per-epoch progress line ("- accuracy: 0.9 - loss: 0.3 ..."), without the timing.
std::vector<std::string> printed_epoch_metrics(const std::string& out) {
  std::vector<std::string> metrics;
  for (const auto& line : split_lines(out)) {
    const auto step = line.find("/step");
    if (step != std::string::npos) metrics.push_back(line.substr(step + 5));
  }
  return metrics;
}

std::uint64_t little_endian_u64(const std::string& bytes) {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  return n;
}

// Trains a shipped config with its own settings into d/run and returns the run's summary.json.
nlohmann::json train_shipped(const std::string& config, const TempDir& d) {
  CommandResult r = run_tensorctl("train " + quoted(source_path(config)) + " --json --output run", d.path());
  REQUIRE(r.status == 0);
  return read_json(d / "run/summary.json");
}

}  // namespace

TEST_SUITE("train") {
  TEST_CASE("configs/digits_mlp.json reaches test accuracy >= 0.95") {
    TempDir d;
    CommandResult r =
        run_tensorctl("train " + quoted(source_path("configs/digits_mlp.json")) + " --json --output run", d.path());
    REQUIRE(r.status == 0);
    const nlohmann::json printed = parse_json(r.out);
    const nlohmann::json saved = read_json(d / "run/summary.json");
    CHECK(printed == saved);
    CHECK(saved.at("epochs") == 20);
    CHECK(saved.at("test").at("accuracy").get<double>() >= 0.95);
    CHECK(saved.at("rows").at("test") == 359);  // round(1797 * 0.2)
  }

  TEST_CASE("configs/digits_cnn.json reaches test accuracy >= 0.97") {
    TempDir d;
    const nlohmann::json saved = train_shipped("configs/digits_cnn.json", d);
    CHECK(saved.at("test").at("accuracy").get<double>() >= 0.97);
    CHECK(saved.at("rows").at("test") == 359);
  }

  TEST_CASE("configs/digits_mlp_bn.json reaches test accuracy >= 0.96") {
    TempDir d;
    const nlohmann::json saved = train_shipped("configs/digits_mlp_bn.json", d);
    // Test accuracy comes from inference mode, which normalizes with the moving statistics: it is only
    // this high when the training steps kept them updated.
    CHECK(saved.at("test").at("accuracy").get<double>() >= 0.96);
    CHECK(saved.at("rows").at("test") == 359);
  }

  TEST_CASE("configs/iris_mlp.json reaches test accuracy >= 0.93") {
    TempDir d;
    const nlohmann::json saved = train_shipped("configs/iris_mlp.json", d);
    CHECK(saved.at("test").at("accuracy").get<double>() >= 0.93);
    CHECK(saved.at("rows").at("test") == 30);
  }

  TEST_CASE("threads.data and --data-threads: recorded, the same weights, changeable on resume, bounded") {
    TempDir d;
    const std::string model = nlohmann::json(source_path("configs/models/wine_mlp.json").string()).dump();
    const std::string csv = nlohmann::json(source_path("configs/data/wine.csv").string()).dump();
    const std::string config = R"({"model": )" + model + R"(, "data": {"csv": )" + csv + R"(}, "epochs": 2, )";
    d.write("c.json", config + R"("threads": {"data": 2}})");
    REQUIRE(run_tensorctl("train c.json --quiet --output two", d.path()).status == 0);
    CHECK(read_json(d / "two/summary.json").at("config").at("threads").at("data") == 2);
    REQUIRE(run_tensorctl("train c.json --quiet --output one --data-threads 1", d.path()).status == 0);
    CHECK(read_json(d / "one/summary.json").at("config").at("threads").at("data") == 1);
    CHECK(read_text(d / "one/weights.safetensors") == read_text(d / "two/weights.safetensors"));
    CommandResult r = run_tensorctl("train c.json --quiet --resume two --epochs 3 --data-threads 1", d.path());
    CHECK_MESSAGE(r.status == 0, r.err);
    d.write("bad.json", config + R"("threads": {"data": 2000}})");
    expect_user_error(d, "train bad.json", {"bad.json", "threads.data", "at most 1024 threads"});
    expect_user_error(d, "train c.json --data-threads -1", {"--data-threads"});
  }

  TEST_CASE("configs/spirals.json reaches test accuracy >= 0.98") {
    TempDir d;
    CHECK(train_shipped("configs/spirals.json", d).at("test").at("accuracy").get<double>() >= 0.98);
  }

  TEST_CASE("binary cross-entropy trains a sigmoid output on a built-in two-class set") {
    TempDir d;
    d.write("bce.json",
            R"({"model": {"input_shape": [2], "layers": [{"type": "Dense", "units": 64, "activation": "tanh"},
      {"type": "Dense", "units": 64, "activation": "tanh"}, {"type": "Dense", "units": 1, "activation": "sigmoid"}]},
      "data": "spirals", "loss": "binary_crossentropy", "optimizer": {"type": "adam", "learning_rate": 0.01}, "epochs": 100, "seed": 5})");
    CommandResult r = run_tensorctl("train bce.json --quiet --output run", d.path());
    REQUIRE(r.status == 0);
    CHECK(read_json(d / "run/summary.json").at("test").at("accuracy").get<double>() >= 0.85);
  }

  TEST_CASE("top_k_accuracy (k = 5) is reported beside accuracy and is never below it") {
    TempDir d;
    d.write("topk.json", R"({"model": ")" + source_path("configs/models/digits_mlp.json").string() +
                             R"(", "data": "digits", "metrics": ["accuracy", "top_k_accuracy"], "epochs": 1})");
    CommandResult r = run_tensorctl("train topk.json --output topk --quiet", d.path());
    REQUIRE(r.status == 0);
    const auto test = read_json(d / "topk/summary.json").at("test");
    CHECK(test.at("top_k_accuracy").get<double>() >= test.at("accuracy").get<double>());
    CHECK(test.at("top_k_accuracy").get<double>() > 0.9);
  }

  TEST_CASE("configs/wine_mlp.json reaches test accuracy >= 0.94") {
    TempDir d;
    const nlohmann::json saved = train_shipped("configs/wine_mlp.json", d);
    CHECK(saved.at("test").at("accuracy").get<double>() >= 0.94);
    CHECK(saved.at("rows").at("test") == 36);  // round(178 * 0.2)
  }

  TEST_CASE("configs/diabetes_regression.json reaches a test MAE under 50 (docs/train-config.md documents it)") {
    TempDir d;
    const nlohmann::json saved = train_shipped("configs/diabetes_regression.json", d);
    // The targets range from 25 to 346; predicting the mean everywhere gives an MAE of about 65.
    CHECK(saved.at("test").at("mae").get<double>() < 50.0);
  }

  TEST_CASE("1 and 2 inter-op and intra-op threads give identical losses and weights") {
    TempDir d;
    const std::string config = quoted(source_path("configs/digits_mlp.json"));
    CommandResult one = run_tensorctl(
        "train " + config + " --epochs 3 --inter-op-threads 1 --intra-op-threads 1 --output one", d.path());
    CommandResult two = run_tensorctl(
        "train " + config + " --epochs 3 --inter-op-threads 2 --intra-op-threads 2 --output two", d.path());
    REQUIRE(one.status == 0);
    REQUIRE(two.status == 0);

    const auto h1 = history_without_seconds(d / "one");
    const auto h2 = history_without_seconds(d / "two");
    REQUIRE(h1.size() == 4);  // header and 3 epochs
    CHECK(h1[0] == std::vector<std::string>{"epoch", "loss", "accuracy", "val_loss", "val_accuracy"});
    CHECK(h1 == h2);
    CHECK(printed_epoch_metrics(one.out).size() == 3);
    CHECK(printed_epoch_metrics(one.out) == printed_epoch_metrics(two.out));

    const std::string w1 = read_text(d / "one/weights.safetensors");
    CHECK(!w1.empty());
    CHECK(w1 == read_text(d / "two/weights.safetensors"));
    CHECK(read_json(d / "one/summary.json").at("test") == read_json(d / "two/summary.json").at("test"));
  }

  TEST_CASE("the CNN and batch-norm configs train to identical weights on 1 and 2 threads") {
    for (const std::string name : {"digits_cnn", "digits_mlp_bn"}) {
      CAPTURE(name);
      TempDir d;
      const std::string config = quoted(source_path("configs/" + name + ".json"));
      CommandResult one = run_tensorctl(
          "train " + config + " --epochs 2 --inter-op-threads 1 --intra-op-threads 1 --output one", d.path());
      CommandResult two = run_tensorctl(
          "train " + config + " --epochs 2 --inter-op-threads 2 --intra-op-threads 2 --output two", d.path());
      REQUIRE(one.status == 0);
      REQUIRE(two.status == 0);
      CHECK(history_without_seconds(d / "one") == history_without_seconds(d / "two"));
      // The checkpoint holds the moving statistics too, so their updates are covered.
      const std::string w1 = read_text(d / "one/weights.safetensors");
      if (name == "digits_mlp_bn") CHECK(w1.find("batch_normalization/moving_mean") != std::string::npos);
      CHECK(w1 == read_text(d / "two/weights.safetensors"));
    }
  }

  TEST_CASE("the run directory holds the documented files") {
    TempDir d;
    CommandResult r =
        run_tensorctl("train " + quoted(source_path("configs/iris_mlp.json")) + " --epochs 2 --output run", d.path());
    REQUIRE(r.status == 0);
    CHECK(d.listing() == std::set<std::string>{"run", "run/checkpoint.safetensors", "run/history.csv", "run/model.json",
                                               "run/summary.json", "run/tensorctl.lock", "run/test.csv",
                                               "run/weights.safetensors"});

    // Progress on stdout, one "Epoch e/E" line and one metrics line per epoch, then the test metrics.
    CHECK(r.out.find("Epoch 1/2\n") != std::string::npos);
    CHECK(r.out.find("Epoch 2/2\n") != std::string::npos);
    CHECK(r.out.find("Test - accuracy: ") != std::string::npos);
    CHECK(r.out.find("run saved to run") != std::string::npos);
    CHECK(r.err.empty());

    const nlohmann::json model = read_json(d / "run/model.json");
    CHECK(model.at("name") == "iris_mlp");
    CHECK(model.at("input_shape") == nlohmann::json::array({4}));
    CHECK(model.at("layers").size() == 2);

    const nlohmann::json summary = read_json(d / "run/summary.json");
    for (const char* key : {"model", "params", "epochs", "train", "validation", "test", "rows", "wall_seconds",
                            "samples_per_second", "config", "preprocessing", "data"})
      CHECK_MESSAGE(summary.contains(key), key);
    CHECK(summary.at("epochs") == 2);
    CHECK(summary.at("params") == 4 * 32 + 32 + 32 * 3 + 3);
    CHECK(summary.at("config").at("epochs") == 2);

    const auto test_rows = split_lines(read_text(d / "run/test.csv"));
    CHECK(test_rows.size() == 31);
    CHECK(test_rows[0] == "sepal_length,sepal_width,petal_length,petal_width,label");
    CHECK(split_lines(read_text(d / "run/history.csv")).size() == 3);

    // safetensors: u64 little-endian header length, JSON header, then exactly the bytes the header describes.
    const std::string w = read_text(d / "run/weights.safetensors");
    REQUIRE(w.size() >= 8);
    const std::uint64_t n = little_endian_u64(w);
    REQUIRE(8 + n <= w.size());
    const nlohmann::json header = parse_json(w.substr(8, n));
    std::uint64_t data_bytes = 0;
    std::int64_t elements = 0;
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") continue;
      CHECK(entry.at("dtype") == "F32");
      std::int64_t count = 1;
      for (const auto& dim : entry.at("shape")) count *= dim.get<std::int64_t>();
      const auto offsets = entry.at("data_offsets").get<std::vector<std::uint64_t>>();
      CHECK(offsets[1] - offsets[0] == static_cast<std::uint64_t>(count) * 4);
      data_bytes = std::max(data_bytes, offsets[1]);
      elements += count;
    }
    CHECK(elements == summary.at("params").get<std::int64_t>());
    CHECK(8 + n + data_bytes == w.size());
  }

  TEST_CASE("progress on a terminal redraws a green bar; TERM=dumb gets plain lines, NO_COLOR no colour") {
    TempDir d;
    const std::string args =
        "train " + quoted(source_path("configs/iris_mlp.json")) + " --epochs 2 --output run --overwrite";
    ScopedEnv term_set("TERM", "xterm");
    ScopedEnv colour_set("NO_COLOR", "");  // empty: colour allowed
    const std::optional<CommandResult> tty = run_piped_and_on_terminal(args, d.path());
    if (!tty) return;
    CHECK(tty->out.find("\x1b[32m") != std::string::npos);
    CHECK(tty->out.find("\x1b[K") != std::string::npos);
    {
      // Escape codes in a log that no terminal reads: the lines a pipe gets instead.
      ScopedEnv term("TERM", "dumb");
      const std::optional<CommandResult> dumb = run_piped_and_on_terminal(args, d.path());
      REQUIRE(dumb);
      CHECK(dumb->out.find('\x1b') == std::string::npos);
      CHECK(dumb->out.find("Epoch 2/2") != std::string::npos);
    }
    ScopedEnv no_colour("NO_COLOR", "1");
    const std::optional<CommandResult> plain = run_piped_and_on_terminal(args, d.path());
    REQUIRE(plain);
    CHECK(plain->out.find("\x1b[32m") == std::string::npos);
    CHECK(plain->out.find("\x1b[0m") == std::string::npos);
    CHECK(plain->out.find("\x1b[K") != std::string::npos);  // still redrawn in place
  }

  TEST_CASE("--json prints only the summary on stdout and the progress on stderr") {
    TempDir d;
    CommandResult r = run_tensorctl(
        "train " + quoted(source_path("configs/iris_mlp.json")) + " --epochs 1 --json --output run", d.path());
    REQUIRE(r.status == 0);
    const nlohmann::json j = parse_json(r.out);
    for (const char* key : {"train", "validation", "test", "epochs", "samples_per_second", "output"})
      CHECK_MESSAGE(j.contains(key), key);
    CHECK(j.at("test").contains("accuracy"));
    CHECK(j.at("test").contains("loss"));
    CHECK(r.err.find("Epoch 1/1") != std::string::npos);
  }

  TEST_CASE("flags override the config") {
    TempDir d;
    CommandResult r = run_tensorctl("train " + quoted(source_path("configs/iris_mlp.json")) +
                                        " --epochs 2 --batch-size 8 --seed 3 --quiet --output run",
                                    d.path());
    REQUIRE(r.status == 0);
    CHECK(r.out.find("Epoch") == std::string::npos);
    const nlohmann::json config = read_json(d / "run/summary.json").at("config");
    CHECK(config.at("epochs") == 2);
    CHECK(config.at("batch_size") == 8);
    CHECK(config.at("seed") == 3);
    CHECK(config.at("output") == "run");
  }

  TEST_CASE("a config written in a temp dir with an inline model and a CSV file trains") {
    TempDir d;
    d.write(
        "data/points.csv",
        "x,y,label\n0,0,0\n0,1,1\n1,0,1\n1,1,0\n0.1,0.1,0\n0.1,0.9,1\n0.9,0.1,1\n0.9,0.9,0\n0.2,0.2,0\n0.2,0.8,1\n");
    d.write("config.json", R"({
    "model": {"name": "xor", "input_shape": [2],
              "layers": [{"type": "Dense", "units": 8, "activation": "tanh"}, {"type": "Dense", "units": 2, "activation": "softmax"}]},
    "data": {"csv": "data/points.csv", "label": "label", "test_split": 0.2, "validation_split": 0},
    "optimizer": {"type": "sgd", "learning_rate": 0.1, "momentum": 0.9},
    "epochs": 3, "batch_size": 4, "output": "run"})");
    CommandResult r = run_tensorctl("train config.json --json", d.path());
    REQUIRE(r.status == 0);
    const nlohmann::json j = parse_json(r.out);
    CHECK(j.at("model") == "xor");
    CHECK(j.at("rows").at("test") == 2);
    CHECK(j.at("data").at("feature_names") == nlohmann::json::array({"x", "y"}));
    CHECK(fs::exists(d / "run/weights.safetensors"));
  }

}  // TEST_SUITE

}  // namespace tctl::cli_test

TEST_CASE("a device that is not there falls back to the CPU with a warning") {
  using namespace tctl::cli_test;
  TempDir dir;
  CommandResult r = run_tensorctl("train " + quoted(source_path("configs/iris_mlp.json")) +
                                      " --epochs 2 --quiet --device cuda:3 --output " + quoted(dir / "run"),
                                  dir.path());
  CHECK(r.status == 0);
  CHECK(r.err.find("warning: dense/") != std::string::npos);
  // Why depends on the machine (no GPU, or a build without CUDA); that it says so does not.
  CHECK(r.err.find("device cuda:3 is not available (") != std::string::npos);
  CHECK(r.err.find("), running on cpu") != std::string::npos);
  CHECK(std::filesystem::exists(dir / "run/weights.safetensors"));

  // With --json the progress goes to stderr too: the warnings come before the first epoch, and say how many
  // more nodes there are than the three they name.
  r = run_tensorctl("train " + quoted(source_path("configs/iris_mlp.json")) +
                        " --epochs 1 --json --device sim:7 --output " + quoted(dir / "run_sim"),
                    dir.path());
  CHECK(r.status == 0);
  const std::string why = "device sim:7 is not available (present: sim:0, sim:1), running on cpu";
  const auto warned = r.err.find(why);
  CHECK(warned < r.err.find("Epoch 1/1"));
  CHECK(r.err.find("more nodes run on cpu instead (--log-device-placement lists every node)") <
        r.err.find("Epoch 1/1"));
  // The run keeps its device: what uses it later warns the same way (without the train-only flag's hint).
  const std::string run = " --run " + quoted(dir / "run_sim");
  const std::string iris = quoted(source_path("configs/iris_mlp.json"));
  dir.write("sim7.json", R"({"model": ")" + source_path("configs/models/iris_mlp.json").string() +
                             R"(", "data": {"dataset": "iris"}, "device": "sim:7"})");
  for (const std::string& command : {"evaluate" + run + " --data " + iris,
                                     "predict" + run + " --input " + quoted(source_path("configs/data/iris.csv")) +
                                         " --output " + quoted(dir / "p.csv"),
                                     std::string("profile sim7.json --iterations 2")}) {
    CAPTURE(command);
    r = run_tensorctl(command, dir.path());
    CHECK(r.status == 0);
    CHECK(r.err.find("warning: dense/") != std::string::npos);
    CHECK(r.err.find(why) != std::string::npos);
    CHECK(r.err.find("more nodes run on cpu instead\n") != std::string::npos);
  }
}

TEST_CASE("one training thread gives the same weights under every locking mode") {
  using namespace tctl::cli_test;
  TempDir dir;
  std::string reference;
  for (const char* mode : {"mutex", "none", "process", "atomic", "snapshot", "dataflow"}) {
    CAPTURE(mode);
    dir.write("config.json", std::string(R"({"model": )") +
                                 nlohmann::json(source_path("configs/models/iris_mlp.json").string()).dump() +
                                 R"(, "data": "iris", "optimizer": {"type": "adam", "locking": ")" + mode +
                                 R"("}, "epochs": 5, "threads": {"inter_op": 1, "intra_op": 1}})");
    CommandResult r = run_tensorctl(std::string("train config.json --quiet --output run_") + mode, dir.path());
    REQUIRE(r.status == 0);
    CHECK(read_json(dir / (std::string("run_") + mode + "/summary.json")).at("config").at("optimizer").at("locking") ==
          mode);
    std::string weights = read_text(dir / (std::string("run_") + mode + "/weights.safetensors"));
    if (reference.empty()) reference = weights;
    CHECK(weights == reference);
  }
}
