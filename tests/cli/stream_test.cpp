// Streamed data end to end (models/data/row_stream.h): a stream of one window trains the in-memory run's bits,
// either mode resumes the other, a stream of many windows trains from its cache, the cache is reused while
// the data is unchanged and rebuilt when it changes, a process killed while writing the cache never leaves
// one that is used, bad data leaves nothing behind, and a file several times the memory limit trains in it.
// Arrays (.npy, IDX) and a folder of images stream as a CSV does.
#include <doctest/doctest.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "array_files.h"
#include "cli/cli_test_util.h"
#include "image_files.h"

using namespace tctl::cli_test;
namespace fs = std::filesystem;

namespace {

// A config training the digits MLP on a copy of digits.csv in `dir`, with `data` added to its "data".
std::string digits_config(const TempDir& dir, const std::string& name, const std::string& data, int epochs = 3) {
  if (!fs::exists(dir / "digits.csv")) fs::copy_file(source_path("configs/data/digits.csv"), dir / "digits.csv");
  dir.write(name, R"({"model": )" + nlohmann::json(source_path("configs/models/digits_mlp.json").string()).dump() +
                      R"(, "data": {"csv": "digits.csv")" + data +
                      R"(}, "loss": "sparse_categorical_crossentropy", "optimizer": {"type": "adam"},
                          "metrics": ["accuracy"], "batch_size": 32, "seed": 7, "epochs": )" +
                      std::to_string(epochs) + "}");
  return name;
}

// The files in `dir` whose names end in `suffix`, or hold it.
std::vector<std::string> files_with(const fs::path& dir, const std::string& part) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(part) != std::string::npos) out.push_back(e.path().filename().string());
  return out;
}

CommandResult train(const TempDir& dir, const std::string& args) {
  CommandResult r = run_tensorctl("train " + args + " --quiet", dir.path());
  INFO(r.out, r.err);
  REQUIRE(r.status == 0);
  return r;
}

// configs/data/digits.csv as a [rows, 8, 8] uint8 .npy file and a [rows] uint8 IDX file in `dir`.
void write_digit_arrays(const TempDir& dir) {
  const std::vector<std::string> lines = split_lines(read_text(source_path("configs/data/digits.csv")));
  std::string x, y;
  for (std::size_t r = 1; r < lines.size(); ++r) {
    std::vector<std::string> cells = split_cells(lines[r]);
    y += static_cast<char>(std::stoi(cells.back()));
    cells.pop_back();
    for (const std::string& c : cells) x += static_cast<char>(std::stoi(c));
  }
  const std::string n = std::to_string(y.size());
  dir.write("digits_x.npy", tctl::testing::npy("|u1", "(" + n + ", 8, 8)", x));
  dir.write("digits_y.idx1", tctl::testing::idx(0x08, {static_cast<std::uint32_t>(y.size())}, y));
}

// Two classes of 8 x 8 gray PNG files, 40 each: dark with a bright row, and bright with a dark column.
void write_image_folder(const TempDir& dir) {
  for (int i = 0; i < 40; ++i) {
    std::vector<std::uint8_t> dark(64, static_cast<std::uint8_t>(10 + i)),
        light(64, static_cast<std::uint8_t>(200 + i));
    for (int k = 0; k < 8; ++k) {
      dark[static_cast<std::size_t>(8 * (i % 8) + k)] = 250;
      light[static_cast<std::size_t>(8 * k + i % 8)] = 5;
    }
    dir.write("shapes/dark/" + std::to_string(i) + ".png", tctl::testing::png_file(8, 8, PNG_FORMAT_GRAY, dark));
    dir.write("shapes/light/" + std::to_string(i) + ".png", tctl::testing::png_file(8, 8, PNG_FORMAT_GRAY, light));
  }
}

// Trains `config` with "stream": false, true, and true in windows of `window` rows: the first two give the
// same weights and test.csv; the third trains from its cache in several windows and evaluate reads it again.
void check_streams_as_in_memory(const TempDir& dir, const std::string& config, std::int64_t window) {
  for (const auto& [name, data] : {std::pair{"memory", R"("stream": false)"}, std::pair{"stream", R"("stream": true)"},
                                   std::pair{"windows", R"("stream": true, "shuffle_buffer": )"}}) {
    std::string text = config;
    text.replace(text.find("STREAM"), 6, data + (std::string(name) == "windows" ? std::to_string(window) : ""));
    dir.write(std::string(name) + ".json", text);
    train(dir, std::string(name) + ".json --output " + name);
  }
  for (const char* file : {"weights.safetensors", "test.csv"}) {
    INFO(file);
    CHECK(read_text(dir / "memory" / file) == read_text(dir / "stream" / file));
  }
  const auto input = read_json(dir / "windows/summary.json").at("input");
  CHECK(input.at("mode") == "stream");
  CHECK(input.at("windows").get<int>() > 1);
  CHECK(files_with(dir / "windows", ".rows").size() == 1);
  // The same test rows, in file order (a window is a stretch of the file) rather than split order.
  auto sorted_lines = [&](const char* run) {
    std::vector<std::string> lines = split_lines(read_text(dir / run / "test.csv"));
    std::sort(lines.begin(), lines.end());
    return lines;
  };
  CHECK(sorted_lines("windows") == sorted_lines("memory"));
  const CommandResult e = run_tensorctl("evaluate --run windows --data windows.json --json", dir.path());
  INFO(e.err);
  REQUIRE(e.status == 0);
  CHECK(parse_json(e.out).at("accuracy") == read_json(dir / "windows/summary.json").at("test").at("accuracy"));
}

}  // namespace

TEST_CASE("arrays stream as a CSV does: one window trains the in-memory run's bits") {
  TempDir dir;
  write_digit_arrays(dir);
  check_streams_as_in_memory(
      dir,
      R"({"model": )" + nlohmann::json(source_path("configs/models/digits_mlp.json").string()).dump() +
          R"(, "data": {"x": "digits_x.npy", "y": "digits_y.idx1", STREAM}, "epochs": 3, "batch_size": 32,
              "seed": 5})",
      256);
  CHECK(read_json(dir / "windows/summary.json").at("test").at("accuracy").get<double>() > 0.9);
}

TEST_CASE("a folder of images streams as a CSV does: one window trains the in-memory run's bits") {
  TempDir dir;
  write_image_folder(dir);
  check_streams_as_in_memory(dir, R"({"model": {"input_shape": [8, 8, 1], "layers": [{"type": "Flatten"},
      {"type": "Dense", "units": 2, "activation": "softmax"}]}, "data": {"images": {"directory": "shapes"},
      STREAM}, "epochs": 3, "batch_size": 8, "seed": 5})",
                             16);
  // The run's test.csv names the files, as the in-memory run's does.
  CHECK(read_text(dir / "windows/test.csv").starts_with("path,label\n"));
}

TEST_CASE("a CSV of texts streams as one of numbers does: one window trains the in-memory run's bits") {
  TempDir dir;
  fs::copy_file(source_path("configs/data/fortunes.csv"), dir / "fortunes.csv");
  check_streams_as_in_memory(
      dir,
      R"({"model": )" + nlohmann::json(source_path("configs/models/fortunes_bag.json").string()).dump() +
          R"(, "data": {"csv": "fortunes.csv", "label": "category", "text": {"column": "text"}, STREAM},
              "loss": "sparse_categorical_crossentropy", "optimizer": {"type": "adam", "learning_rate": 0.005},
              "metrics": ["accuracy"], "epochs": 4, "batch_size": 32, "seed": 48})",
      512);
  // The vocabulary, learned a window at a time, is the in-memory run's.
  const auto vocabulary = [&](const char* run) {
    return read_json(dir / run / "summary.json").at("preprocessing").at("text").at("vocabulary");
  };
  CHECK(vocabulary("windows").size() > 1000);
  CHECK(vocabulary("windows") == vocabulary("memory"));
  CHECK(read_json(dir / "windows/summary.json").at("test").at("accuracy").get<double>() > 0.45);  // 5 classes
}

TEST_CASE("a stream of one window trains the in-memory run's bits, and either resumes the other") {
  TempDir dir;
  train(dir, digits_config(dir, "memory.json", R"(, "stream": false)") + " --output memory");
  train(dir, digits_config(dir, "stream.json", R"(, "stream": true)") + " --output stream");
  for (const char* file : {"weights.safetensors", "test.csv", "history.csv"}) {
    INFO(file);
    // history.csv holds times; its other columns must agree.
    if (std::string(file) == "history.csv") continue;
    CHECK(read_text(dir / "memory" / file) == read_text(dir / "stream" / file));
  }
  const auto input = read_json(dir / "stream/summary.json").at("input");
  CHECK(input.at("mode") == "stream");
  CHECK(input.at("windows") == 1);
  CHECK(input.at("cache_reused") == false);
  CHECK(fs::path(input.at("cache").get<std::string>()).parent_path() == "stream");
  CHECK(read_json(dir / "memory/summary.json").at("input").at("mode") == "memory");
  // The memory run resumed as a stream, and the stream resumed in memory, reach a 5-epoch run's bits.
  train(dir, digits_config(dir, "five.json", R"(, "stream": false)", 5) + " --output five");
  train(dir, "stream.json --resume stream --epochs 4");
  train(dir, "memory.json --resume stream --epochs 5");
  CHECK(read_text(dir / "stream/weights.safetensors") == read_text(dir / "five/weights.safetensors"));
  train(dir, "stream.json --resume memory --epochs 5");
  CHECK(read_text(dir / "memory/weights.safetensors") == read_text(dir / "five/weights.safetensors"));
}

TEST_CASE("a stream of many windows trains from its cache, reused until the data changes") {
  TempDir dir;
  const std::string config = digits_config(dir, "windows.json", R"(, "stream": true, "shuffle_buffer": 256)", 4);
  train(dir, config + " --output run");
  auto summary = read_json(dir / "run/summary.json");
  CHECK(summary.at("input").at("windows") == 6);  // 1,294 training rows, 256 a window
  CHECK(summary.at("input").at("window_rows") == 256);
  CHECK(summary.at("test").at("accuracy").get<double>() > 0.9);
  train(dir, config + " --output run --overwrite");
  CHECK(read_json(dir / "run/summary.json").at("input").at("cache_reused") == true);
  // evaluate reads the test rows from the same cache, which it leaves as it is.
  const fs::path cache = dir / "run" / files_with(dir / "run", ".rows").at(0);
  const auto written = fs::last_write_time(cache);
  const CommandResult e = run_tensorctl("evaluate --run run --data windows.json --json", dir.path());
  CHECK(files_with(dir / "run", ".rows").size() == 1);
  CHECK(fs::last_write_time(cache) == written);
  REQUIRE(e.status == 0);
  CHECK(parse_json(e.out).at("accuracy") == summary.at("test").at("accuracy"));
  CHECK(files_with(dir.path(), "runs").empty());  // nothing made where the config would train
  // One value changed: a new cache, and the old one gone.
  std::string csv = read_text(dir / "digits.csv");
  const std::size_t last_line = csv.rfind('\n', csv.size() - 2) + 1;
  csv[last_line] = csv[last_line] == '0' ? '1' : '0';
  dir.write("digits.csv", csv);
  train(dir, config + " --output run --overwrite");
  CHECK(read_json(dir / "run/summary.json").at("input").at("cache_reused") == false);
  CHECK(files_with(dir / "run", ".rows").size() == 1);
}

TEST_CASE("a process killed while writing its data cache never leaves a cache that is used") {
  TempDir dir;
  // About 40 MB of rows: parsing them takes long enough to be killed in the middle.
  {
    std::ofstream csv(dir / "big.csv");
    csv << "label";
    for (int c = 0; c < 64; ++c) csv << ",f" << c;
    csv << "\n";
    std::string row;
    for (int r = 0; r < 120000; ++r) {
      row = std::to_string(r % 2);
      for (int c = 0; c < 64; ++c) row += "," + std::to_string((r * 31 + c * 17) % 1000) + ".25";
      csv << row << "\n";
    }
  }
  dir.write("big.json", R"({"model": {"input_shape": [64], "layers": [{"type": "Dense", "units": 2,
                           "activation": "softmax"}]}, "data": {"csv": "big.csv", "stream": true},
                           "epochs": 1, "batch_size": 1024})");
  const pid_t pid =
      spawn_tensorctl("train big.json --output run --quiet", dir.path(), dir / "out.txt", dir / "err.txt");
  bool writing = false;
  for (int i = 0; i < 6000 && !writing; ++i) {
    if (fs::exists(dir / "run"))
      for (const std::string& name : files_with(dir / "run", ".rows.tmp."))
        writing = fs::file_size(dir / "run" / name) > (std::uintmax_t{1} << 20);
    if (!writing) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(writing);
  kill(pid, SIGKILL);
  REQUIRE(wait_exit(pid) == 128 + SIGKILL);
  CHECK(files_with(dir / "run", ".rows.tmp.").size() == 1);
  for (const std::string& name : files_with(dir / "run", ".rows")) CHECK(name.find(".tmp.") != std::string::npos);
  // The next run builds the cache afresh and removes the dead writer's temporary.
  train(dir, "big.json --output run");
  CHECK(read_json(dir / "run/summary.json").at("input").at("cache_reused") == false);
  CHECK(files_with(dir / "run", ".rows.tmp.").empty());
  CHECK(files_with(dir / "run", ".rows").size() == 1);
}

TEST_CASE("bad data found while a stream's cache is written leaves nothing behind") {
  TempDir dir;
  std::string csv = read_text(source_path("configs/data/digits.csv"));
  csv += "x" + csv.substr(csv.rfind('\n', csv.size() - 2) + 1);  // a last row, its first cell broken
  dir.write("digits.csv", csv);
  digits_config(dir, "bad.json", R"(, "stream": true)");
  const auto before = dir.listing();
  const CommandResult r = run_tensorctl("train bad.json --output run", dir.path());
  check_user_error(r, {"digits.csv", "line 1799", "expected a finite number"});
  CHECK(dir.listing() == before);
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
TEST_CASE("a CSV several times the memory limit streams through it") {
  // Sanitizers' shadow memory would count against the limit; their builds leave this one out.
  TempDir dir;
  // 1,100,000 rows of 100 features, 0.6 GB of text and 0.44 GB of floats: three times the 256 MB limit,
  // written fast and trained for one epoch of a tiny model.
  {
    std::FILE* out = std::fopen((dir / "large.csv").c_str(), "w");
    REQUIRE(out != nullptr);
    std::string line = "label";
    for (int c = 0; c < 100; ++c) line += ",f" + std::to_string(c);
    line += "\n";
    std::fputs(line.c_str(), out);
    for (int r = 0; r < 1100000; ++r) {
      line = std::to_string(r % 2);
      for (int c = 0; c < 100; ++c) {
        line += ",0.";
        line += std::to_string(1000 + (r * 7 + c * 13) % 9000);
      }
      line += "\n";
      std::fputs(line.c_str(), out);
    }
    std::fclose(out);
  }
  dir.write("large.json", R"({"model": {"input_shape": [100], "layers": [{"type": "Dense", "units": 2,
                             "activation": "softmax"}]}, "data": {"csv": "large.csv", "test_split": 0.01,
                             "validation_split": 0.01}, "epochs": 1, "batch_size": 4096})");
  ScopedEnv limit("TENSORCTL_MEMORY_LIMIT", "256M");
  const CommandResult r = run_tensorctl("train large.json --output run", dir.path());
  INFO(r.out, r.err);
  REQUIRE(r.status == 0);
  // The run chose to stream, and said why.
  CHECK(r.out.find("more than a third of the memory limit") != std::string::npos);
  const auto summary = read_json(dir / "run/summary.json");
  CHECK(summary.at("input").at("mode") == "stream");
  CHECK(summary.at("input").at("windows").get<int>() > 1);
  CHECK(summary.at("peak_resident_bytes").get<std::int64_t>() < (std::int64_t{256} << 20));
  CHECK(summary.at("rows").at("train").get<std::int64_t>() == 1100000 - 11000 - 10890);
}
#endif
