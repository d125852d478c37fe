// `tensorctl tune` end to end: every thread setting that fits the cores measured, the fastest written into
// a copy of the config (its relative paths seen from the copy's folder, so it trains) with the table beside
// it; an output that would replace the config, or is no JSON, and a budget of nothing are refused.
#include <doctest/doctest.h>

#include "cli/cli_test_util.h"

namespace tctl::cli_test {

TEST_CASE("tune measures the thread settings that fit the cores and writes the fastest into a copy") {
  TempDir dir;
  const std::string config = quoted(source_path("configs/digits_mlp.json"));
  const CommandResult r = run_tensorctl("tune " + config + " --budget 1 --cores 2 -o tuned/digits.json", dir.path());
  INFO(r.out, r.err);
  REQUIRE(r.status == 0);
  const std::vector<std::string> table = split_lines(read_text(dir / "tuned/digits.csv"));
  // The config's own threads (0: one per core, so 2 x 2), then 1 x 1, 1 x 2 and 2 x 1.
  REQUIRE(table.size() == 5);
  CHECK(table[0] == "inter_op,intra_op,step_ms,samples_per_second,speed_up");
  CHECK(table[1].starts_with("2,2,"));
  CHECK(table[2].starts_with("1,1,"));
  CHECK(table[3].starts_with("1,2,"));
  CHECK(table[4].starts_with("2,1,"));
  // The copy holds the fastest row's threads.
  std::size_t fastest = 1;
  for (std::size_t i = 2; i < table.size(); ++i)
    if (std::stod(split_cells(table[i])[2]) < std::stod(split_cells(table[fastest])[2])) fastest = i;
  const nlohmann::json copy = read_json(dir / "tuned/digits.json");
  const std::vector<std::string> best = split_cells(table[fastest]);
  CHECK(copy.at("threads").at("inter_op") == std::stoi(best[0]));
  CHECK(copy.at("threads").at("intra_op") == std::stoi(best[1]));
  CHECK(r.out.find("Fastest: inter-op " + best[0] + ", intra-op " + best[1]) != std::string::npos);
  // Its model path is the config's spec seen from tuned/: the copy trains.
  CHECK(run_tensorctl("train tuned/digits.json --epochs 1 --output run --quiet", dir.path()).status == 0);

  // A config in the current folder, its copy by default beside it: the folder of a bare name is ".".
  dir.write("iris_mlp.json", read_text(source_path("configs/models/iris_mlp.json")));
  dir.write("iris.json", R"({"model": "iris_mlp.json", "data": "iris", "epochs": 1})");
  const CommandResult here = run_tensorctl("tune iris.json --budget 0.3", dir.path());
  INFO(here.err);
  CHECK(here.status == 0);
  CHECK(read_json(dir / "iris.tuned.json").at("model") == "iris_mlp.json");

  expect_user_error(dir, "tune " + config + " -o " + config, {"is the config itself"});
  expect_user_error(dir, "tune " + config + " -o tuned.txt", {"-o: tuned.txt: the tuned config is JSON"});
  expect_user_error(dir, "tune " + config + " --budget 0", {"--budget: expected seconds"});
}

}  // namespace tctl::cli_test
