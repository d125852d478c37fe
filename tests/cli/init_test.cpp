// `tensorctl init` end to end: configs written from a CSV's columns that train at once, for classes (names or
// ids, guessed or asked for) and for a regression target; mistakes are one line, exit 2, nothing written.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include "cli/cli_test_util.h"

namespace tctl::cli_test {

TEST_CASE("init writes a config and spec from a CSV's columns that train at once") {
  TempDir dir;
  dir.write("data/wine.csv", read_text(source_path("configs/data/wine.csv")));
  CommandResult r = run_tensorctl("init data/wine.csv --label label", dir.path());
  INFO(r.out, r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("178 rows, 13 features, label \"label\": 3 classes (classification)") != std::string::npos);
  const nlohmann::json config = read_json(dir / "wine.json");
  CHECK(config.at("data").at("csv") == "data/wine.csv");
  CHECK(config.at("loss") == "sparse_categorical_crossentropy");
  CHECK(read_json(dir / "wine.model.json").at("input_shape") == nlohmann::json::array({13}));
  r = run_tensorctl("train wine.json --quiet --output run", dir.path());
  REQUIRE(r.status == 0);
  CHECK(read_json(dir / "run/summary.json").at("test").at("accuracy").get<double>() > 0.8);
  // A regression target guessed from its values, written into a folder of configs.
  dir.write("diabetes.csv", read_text(source_path("configs/data/diabetes.csv")));
  r = run_tensorctl("init diabetes.csv --label target -o configs/diabetes.json", dir.path());
  REQUIRE(r.status == 0);
  CHECK(read_json(dir / "configs/diabetes.json").at("loss") == "mse");
  CHECK(read_json(dir / "configs/diabetes.json").at("data").at("csv") == "../diabetes.csv");
  CHECK(run_tensorctl("train configs/diabetes.json --quiet --epochs 3 --output reg", dir.path()).status == 0);
  // Class ids 1..3 need 4 outputs (id 0 unused); --task asks for what the values would not say.
  std::string shifted = "a,b,y\n";
  for (int i = 0; i < 60; ++i)
    shifted += std::to_string(i % 7) + "," + std::to_string(i % 5) + "," + std::to_string(1 + i % 3) + "\n";
  dir.write("shifted.csv", shifted);
  REQUIRE(run_tensorctl("init shifted.csv --label y", dir.path()).status == 0);
  CHECK(read_json(dir / "shifted.model.json").at("layers").back().at("units") == 4);
  CHECK(run_tensorctl("train shifted.json --quiet --epochs 2 --output ids", dir.path()).status == 0);
  REQUIRE(run_tensorctl("init shifted.csv --label y --task regression -o as_numbers.json", dir.path()).status == 0);
  CHECK(read_json(dir / "as_numbers.json").at("loss") == "mse");
}

TEST_CASE("init mistakes are one line naming the flag or file, exit 2, nothing written") {
  TempDir dir;
  dir.write("wine.csv", read_text(source_path("configs/data/wine.csv")));
  expect_user_error(dir, "init wine.csv --label kind", {"--label: no column \"kind\" in wine.csv"});
  expect_user_error(dir, "init wine.csv --label label --task clustering", {"--task"});
  dir.write("words.csv", "a,b,label\n1,x,0\n");
  expect_user_error(dir, "init words.csv --label label", {"words.csv"});
  // Labels train would refuse are refused here, at their line, rather than written into a config that fails.
  auto labels = [&](const std::string& name, const std::vector<std::string>& values) {
    std::string csv = "a,b,label\n";
    for (int i = 0; i < 30; ++i)
      csv += fmt::format("{},{},{}\n", i, i % 4, values[static_cast<std::size_t>(i) % values.size()]);
    dir.write(name, csv);
  };
  labels("negative.csv", {"0", "1", "-1"});
  expect_user_error(dir, "init negative.csv --label label",
                    {"negative.csv: line 4: column \"label\": class labels must be integers in 0..99999, got -1"});
  labels("gap.csv", {"0", "1", "", "1"});
  expect_user_error(dir, "init gap.csv --label label", {"gap.csv: line 4: column \"label\": empty class label"});
  labels("large.csv", {"0", "1", "500000"});
  expect_user_error(dir, "init large.csv --label label", {"large.csv: line 4:", "got 5e+05"});
  labels("half.csv", {"0", "1", "2.5"});
  expect_user_error(dir, "init half.csv --label label --task classification", {"half.csv: line 4:", "got 2.5"});
  labels("cat.csv", {"0", "1", "cat"});
  expect_user_error(dir, "init cat.csv --label label --task regression", {"cat.csv: line 4:", "\"cat\""});
  REQUIRE(run_tensorctl("init wine.csv --label label", dir.path()).status == 0);
  expect_user_error(dir, "init wine.csv --label label", {"wine.json", "exists already"});
  CHECK(run_tensorctl("init wine.csv --label label --overwrite", dir.path()).status == 0);
}

}  // namespace tctl::cli_test
