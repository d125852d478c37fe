// `tensorctl sweep` end to end (app/sweep.cpp), real processes: a grid of the digits MLP's learning rate and
// width on two jobs gives a run per trial, each the bits of `train --set` with its values, ranked by the metric
// in the table, results.csv and results.json, and best.json names the best; run again it trains only the
// trials that lack a summary; random trials draw inside their ranges, seeded; mistakes are one line, exit 2,
// nothing written.
#include <doctest/doctest.h>

#include <set>
#include <thread>

#include "cli/cli_test_util.h"

namespace tctl::cli_test {

TEST_SUITE("sweep") {
  TEST_CASE("a grid sweep trains every combination on two jobs, ranks them, and resumes what is missing") {
    TempDir dir;
    const std::string config = quoted(source_path("configs/digits_mlp.json"));
    const std::string sweep = "sweep " + config +
                              " --grid optimizer.learning_rate=1e-3,3e-3 --grid layers[1].units=32,64 --set epochs=3 "
                              "--jobs " +
                              std::to_string(std::thread::hardware_concurrency() >= 2 ? 2 : 1) + " -o grid";
    CommandResult r = run_tensorctl(sweep, dir.path());
    INFO(r.out, r.err);
    REQUIRE(r.status == 0);
    const std::vector<std::string> lines = split_lines(read_text(dir / "grid/results.csv"));
    REQUIRE(lines.size() == 5);
    CHECK(lines[0] == "trial,optimizer.learning_rate,layers[1].units,validation.loss,seconds,status");
    // Ranked by validation loss, lowest first, as results.json says.
    const nlohmann::json results = read_json(dir / "grid/results.json");
    CHECK(results.at("higher_is_better") == false);
    double last = -1;
    std::set<std::string> combinations;
    for (const auto& t : results.at("trials")) {
      CHECK(t.at("value").get<double>() >= last);
      last = t.at("value").get<double>();
      CHECK(t.at("status") == 0);
      combinations.insert(t.at("set").dump());
    }
    CHECK(combinations.size() == 4);
    // The best trial is the train run of its values.
    const nlohmann::json best = read_json(dir / "grid/best.json");
    const std::string name = best.at("trial");
    CHECK(name == results.at("trials").at(0).at("name"));
    CHECK(r.out.find("Best: " + name + ", validation.loss ") != std::string::npos);
    const nlohmann::json& set = results.at("trials").at(0).at("set");
    // The command it prints, run by the shell as given, with files about that its unquoted
    // layers[1].units=N would match as a glob (and turn into --set layers1.units=N).
    dir.write("layers1.units=32", "");
    dir.write("layers1.units=64", "");
    const std::string command = best.at("command");
    REQUIRE(command.starts_with("tensorctl train "));
    const CommandResult alone = run_tensorctl(command.substr(10) + " --output alone --quiet", dir.path());
    INFO(command, alone.err);
    REQUIRE(alone.status == 0);
    CHECK(read_text(dir / "alone/weights.safetensors") == read_text(dir / "grid" / name / "weights.safetensors"));
    CHECK(best.at("config").at("model").at("layers").at(1).at("units") ==
          std::stoi(set.at("layers[1].units").get<std::string>()));
    // Run again after one trial lost its summary: only that one trains again.
    const auto kept = std::filesystem::last_write_time(dir / "grid/trial-001/summary.json");
    std::filesystem::remove(dir / "grid/trial-002/summary.json");
    r = run_tensorctl(sweep, dir.path());
    REQUIRE(r.status == 0);
    CHECK(std::filesystem::last_write_time(dir / "grid/trial-001/summary.json") == kept);
    CHECK(std::filesystem::exists(dir / "grid/trial-002/summary.json"));
    // The same ranking and values (a trial trained again takes other seconds).
    auto without_seconds = [](nlohmann::json j) {
      for (auto& t : j.at("trials")) t.erase("seconds");
      return j;
    };
    CHECK(without_seconds(read_json(dir / "grid/results.json")) == without_seconds(results));
    // Another plan in the same folder is refused.
    expect_user_error(dir, "sweep " + config + " --grid epochs=1,2 -o grid", {"holds another sweep"});
  }

  TEST_CASE("random trials draw their values inside the ranges, the same for the same seed") {
    TempDir dir;
    const std::string sweep = "sweep " + quoted(source_path("configs/digits_mlp.json")) +
                              " --random 4 --range optimizer.learning_rate=1e-4:1e-2:log --range "
                              "layers[1].units=16:40 --set epochs=1 --metric validation.accuracy --seed 3 -o ";
    REQUIRE(run_tensorctl(sweep + "a", dir.path()).status == 0);
    REQUIRE(run_tensorctl(sweep + "b", dir.path()).status == 0);
    const nlohmann::json a = read_json(dir / "a/sweep.json");
    CHECK(a.at("trials") == read_json(dir / "b/sweep.json").at("trials"));
    REQUIRE(a.at("trials").size() == 4);
    for (const auto& t : a.at("trials")) {
      const std::string rate = t.at("set").at(0), units = t.at("set").at(1);
      const double r = std::stod(rate.substr(rate.find('=') + 1));
      const int u = std::stoi(units.substr(units.find('=') + 1));
      CHECK(r >= 1e-4);
      CHECK(r <= 1e-2);
      CHECK(u >= 16);
      CHECK(u <= 40);
    }
    CHECK(read_json(dir / "a/results.json").at("higher_is_better") == true);
  }

  TEST_CASE("sweep mistakes are one line naming the flag or key, exit 2, nothing written") {
    TempDir dir;
    const std::string config = quoted(source_path("configs/digits_mlp.json"));
    expect_user_error(dir, "sweep " + config + " --grid optimizer.learning_rat=1e-3 -o s",
                      {"digits_mlp.json: optimizer.learning_rat: unknown key"});
    expect_user_error(dir, "sweep " + config + " --grid layers[1].units=8,x -o s",
                      {"layers[1].units: expected a positive integer, got \"x\""});
    expect_user_error(dir, "sweep " + config + " -o s", {"--grid: give --grid KEY=V1,V2,..."});
    expect_user_error(dir, "sweep " + config + " --grid epochs=1 --metric validaton.loss -o s",
                      {"--metric: \"validaton.loss\" is none of the trials' figures"});
    expect_user_error(dir, "sweep " + config + " --random 2 --range epochs=3:1 -o s", {"LO must be below HI"});
    expect_user_error(dir, "sweep " + config + " --grid epochs=1 --jobs 4096 -o s", {"--jobs"});
    // A key on two axes would train with the later value and show the earlier in the table.
    expect_user_error(dir, "sweep " + config + " --grid epochs=1,2 --grid epochs=2,3 -o s",
                      {"--grid: the key epochs is given twice"});
    expect_user_error(dir, "sweep " + config + " --random 2 --range epochs=1:3 --range epochs=2:4 -o s",
                      {"--range: the key epochs is given twice"});
    // A value that is not UTF-8 (a Latin-1 name) is refused before sweep.json, which could not record it.
    expect_user_error(dir, "sweep " + config + " --grid 'layers[0].name=caf\xe9,b' -o s",
                      {"--grid: the value \"layers[0].name=caf\\xe9,b\" holds the byte 0xe9 at offset 18"});
  }
}

}  // namespace tctl::cli_test
