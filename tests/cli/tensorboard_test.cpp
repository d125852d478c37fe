// The TensorBoard callback: event files whose records (CRCs checked by the tests' own reader) hold
// history.csv's values per epoch, the learning rate, and the running averages per step; a resumed run adds a
// file; --overwrite removes the log folder; mistakes in its keys are refused.
#include <doctest/doctest.h>

#include <cmath>
#include <map>

#include "cli/cli_test_util.h"
#include "event_records.h"

namespace tctl::cli_test {
namespace {

namespace fs = std::filesystem;

std::string config(const std::string& callback) {
  return R"({"model": ")" + source_path("configs/models/iris_mlp.json").string() +
         R"(", "data": "iris", "epochs": 4, "batch_size": 16, "seed": 7,
    "optimizer": {"type": "adam", "learning_rate": 0.005}, "callbacks": [)" +
         callback + "]}";
}

// The events of every file in `dir`, files in name order, file-version records left out.
std::vector<testing::DecodedEvent> events_in(const fs::path& dir, std::size_t* files = nullptr) {
  std::vector<fs::path> paths;
  for (const auto& f : fs::directory_iterator(dir)) paths.push_back(f.path());
  std::sort(paths.begin(), paths.end());
  if (files != nullptr) *files = paths.size();
  std::vector<testing::DecodedEvent> out;
  for (const auto& p : paths) {
    CHECK(p.filename().string().starts_with("events.out.tfevents."));
    const auto events = testing::read_event_records(read_text(p));
    REQUIRE(!events.empty());
    CHECK(events[0].file_version == "brain.Event:2");
    out.insert(out.end(), events.begin() + 1, events.end());
  }
  return out;
}

// history.csv as column name -> value per epoch.
std::map<std::string, std::vector<double>> history(const fs::path& run) {
  const auto lines = split_lines(read_text(run / "history.csv"));
  const auto names = split_cells(lines[0]);
  std::map<std::string, std::vector<double>> out;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const auto cells = split_cells(lines[i]);
    for (std::size_t c = 0; c < names.size(); ++c) out[names[c]].push_back(std::stod(cells[c]));
  }
  return out;
}

// history.csv keeps six significant digits.
bool close(double a, double b) { return std::abs(a - b) <= 1e-5 * std::max(1.0, std::abs(b)); }

}  // namespace

TEST_SUITE("tensorboard") {
  TEST_CASE("TensorBoard writes event files holding history.csv's values, the learning rate and each step") {
    TempDir d;
    d.write("train.json", config(R"({"type": "TensorBoard", "log_dir": "tb", "update_freq": "batch"})"));
    REQUIRE(run_tensorctl("train train.json --quiet --output run", d.path()).status == 0);
    const auto h = history(d / "run");
    const auto train = events_in(d / "run/tb/train");
    const auto validation = events_in(d / "run/tb/validation");
    // iris: 150 rows, 30 for test, 12 for validation, 108 for training: 7 steps of 16 per epoch.
    const std::int64_t steps = 7;
    std::vector<testing::DecodedEvent> epochs, batches;
    for (const auto& e : train) (e.scalars.count("epoch_loss") ? epochs : batches).push_back(e);
    REQUIRE(epochs.size() == 4);
    REQUIRE(batches.size() == static_cast<std::size_t>(4 * steps));
    REQUIRE(validation.size() == 4);
    for (std::size_t i = 0; i < 4; ++i) {
      CAPTURE(i);
      CHECK(epochs[i].step == static_cast<std::int64_t>(i + 1));
      CHECK(close(epochs[i].scalars.at("epoch_loss"), h.at("loss")[i]));
      CHECK(close(epochs[i].scalars.at("epoch_accuracy"), h.at("accuracy")[i]));
      CHECK(epochs[i].scalars.at("epoch_learning_rate") == 0.005f);
      CHECK(validation[i].step == static_cast<std::int64_t>(i + 1));
      CHECK(close(validation[i].scalars.at("epoch_loss"), h.at("val_loss")[i]));
      CHECK(close(validation[i].scalars.at("epoch_accuracy"), h.at("val_accuracy")[i]));
      // The last step's running average is the epoch's.
      CHECK(close(batches[(i + 1) * steps - 1].scalars.at("batch_loss"), h.at("loss")[i]));
    }
    for (std::size_t s = 0; s < batches.size(); ++s) CHECK(batches[s].step == static_cast<std::int64_t>(s + 1));
    CHECK(epochs[0].wall_time > 1.7e9);
  }

  TEST_CASE("update_freq N writes every Nth step; a resumed run adds a file; --overwrite removes the logs") {
    TempDir d;
    d.write("train.json", config(R"({"type": "TensorBoard", "update_freq": 3})"));
    REQUIRE(run_tensorctl("train train.json --quiet --epochs 2 --output run", d.path()).status == 0);
    REQUIRE(run_tensorctl("train train.json --quiet --resume run", d.path()).status == 0);
    std::size_t files = 0;
    const auto train = events_in(d / "run/logs/train", &files);
    CHECK(files == 2);
    std::vector<std::int64_t> epoch_steps, batch_steps;
    for (const auto& e : train) (e.scalars.count("epoch_loss") ? epoch_steps : batch_steps).push_back(e.step);
    CHECK(epoch_steps == std::vector<std::int64_t>{1, 2, 3, 4});
    CHECK(batch_steps == std::vector<std::int64_t>{3, 6, 9, 12, 15, 18, 21, 24, 27});
    const auto h = history(d / "run");
    CHECK(close(train.back().scalars.at("epoch_loss"), h.at("loss")[3]));

    REQUIRE(run_tensorctl("train train.json --quiet --epochs 1 --output run --overwrite", d.path()).status == 0);
    const auto fresh = events_in(d / "run/logs/train", &files);
    CHECK(files == 1);
    CHECK(fresh.size() == 3);  // steps 3 and 6 of the one epoch, and the epoch
    // A folder tensorctl did not write inside the logs keeps --overwrite away.
    fs::create_directory(d / "run/logs/mine");
    expect_user_error(d, "train train.json --quiet --epochs 1 --output run --overwrite",
                      {"--overwrite deletes only the files tensorctl writes, and logs is not one of them"});
  }

  TEST_CASE("TensorBoard's keys are checked: log_dir a plain folder name, update_freq epoch, batch or a count") {
    TempDir d;
    for (const auto& [callback, message] : std::vector<std::pair<std::string, std::string>>{
             {R"({"type": "TensorBoard", "log_dir": "../outside"})",
              "callbacks[0].log_dir: expected a plain folder name"},
             {R"({"type": "TensorBoard", "log_dir": "summary.json"})", "callbacks[0].log_dir"},
             {R"({"type": "TensorBoard", "update_freq": "weekly"})",
              "callbacks[0].update_freq: expected \"epoch\", \"batch\" or a number of steps, got \"weekly\""},
             {R"({"type": "TensorBoard", "update_freq": 0})", "callbacks[0].update_freq"},
             {R"({"type": "TensorBoard", "monitor": "loss"})", "callbacks[0].monitor"},
             // Names two callbacks share, or that no file system takes, failed only when the run wrote them,
             // leaving a partial run directory.
             {R"({"type": "TensorBoard"}, {"type": "ModelCheckpoint", "filename": "logs"})",
              "callbacks[1].filename: \"logs\" is also callbacks[0]'s; each callback needs a file or folder of its "
              "own"},
             {R"({"type": "ModelCheckpoint"}, {"type": "ModelCheckpoint", "monitor": "val_accuracy"})",
              "callbacks[1].filename: \"best.safetensors\" is also callbacks[0]'s"},
             {R"({"type": "ModelCheckpoint", "filename": ")" + std::string(300, 'a') + R"("})",
              "callbacks[0].filename: expected a plain file name"},
             {R"({"type": "TensorBoard", "log_dir": "a\u001bb"})",
              "callbacks[0].log_dir: expected a plain folder name"}}) {
      CAPTURE(callback);
      d.write("train.json", config(callback));
      const auto before = d.listing();
      expect_user_error(d, "train train.json --quiet --output run", {"train.json: " + message});
    }
  }
}

}  // namespace tctl::cli_test
