// `train --folds K` end to end: K runs in the output folder, each the bits of a run of its one fold (the
// config's data.folds and data.fold), their validation parts together the rows the test split leaves, and
// the table, folds.csv and folds.json of their figures with the mean and standard deviation.
#include <doctest/doctest.h>

#include <cmath>

#include "cli/cli_test_util.h"

namespace tctl::cli_test {

TEST_CASE("train --folds 3 trains a run per fold and sums their figures up; each fold is its own run's bits") {
  TempDir dir;
  const std::string config = quoted(source_path("configs/digits_mlp.json"));
  const CommandResult r = run_tensorctl("train " + config + " --folds 3 --set epochs=2 --output cv", dir.path());
  INFO(r.out, r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("Fold 3/3: validation loss ") != std::string::npos);
  std::int64_t validated = 0;
  for (int k = 1; k <= 3; ++k) {
    const nlohmann::json s = read_json(dir / ("cv/fold-" + std::to_string(k)) / "summary.json");
    CHECK(s.at("rows").at("test") == 359);
    validated += s.at("rows").at("validation").get<std::int64_t>();
    CHECK(s.at("config").at("data").at("fold") == k);
  }
  CHECK(validated == 1797 - 359);
  REQUIRE(run_tensorctl("train " + config + " --set epochs=2 --set data.folds=3 --set data.fold=2 --output two --quiet",
                        dir.path())
              .status == 0);
  CHECK(read_text(dir / "two/weights.safetensors") == read_text(dir / "cv/fold-2/weights.safetensors"));
  const nlohmann::json folds = read_json(dir / "cv/folds.json");
  REQUIRE(folds.at("folds").size() == 3);
  double sum = 0;
  for (const auto& f : folds.at("folds")) sum += f.at("validation accuracy").get<double>();
  CHECK(folds.at("mean").at("validation accuracy").get<double>() == doctest::Approx(sum / 3));
  CHECK(folds.at("std").at("validation accuracy").get<double>() >= 0);
  const std::vector<std::string> csv = split_lines(read_text(dir / "cv/folds.csv"));
  REQUIRE(csv.size() == 6);
  CHECK(csv[0] == "fold,validation loss,validation accuracy,test loss,test accuracy");
  CHECK(csv[4].starts_with("mean,"));
  CHECK(csv[5].starts_with("std,"));
  // --resume with --folds takes the folds' folder: a finished fold is checked and gives its figures again, a
  // fold left without a run trains, and the table is the one an unbroken run gives.
  const std::string table = read_text(dir / "cv/folds.json");
  std::filesystem::remove_all(dir / "cv/fold-3");
  std::filesystem::remove(dir / "cv/folds.json");
  const CommandResult resumed =
      run_tensorctl("train " + config + " --folds 3 --set epochs=2 --resume cv --quiet", dir.path());
  INFO(resumed.err);
  REQUIRE(resumed.status == 0);
  CHECK(read_text(dir / "cv/folds.json") == table);
  // Continued to 3 epochs, each fold is the bits of a run of 3 epochs.
  REQUIRE(run_tensorctl("train " + config + " --folds 3 --set epochs=2 --epochs 3 --resume cv --quiet", dir.path())
              .status == 0);
  REQUIRE(
      run_tensorctl("train " + config + " --set epochs=3 --set data.folds=3 --set data.fold=3 --output three --quiet",
                    dir.path())
          .status == 0);
  CHECK(read_text(dir / "three/weights.safetensors") == read_text(dir / "cv/fold-3/weights.safetensors"));
  expect_user_error(dir, "train " + config + " --folds 3 --set epochs=2 --set batch_size=64 --resume cv",
                    {"batch_size: cannot resume"});
  expect_user_error(dir, "train " + config + " --folds 3 --resume cv/fold-1", {"--resume: cv/fold-1 is one run"});
  expect_user_error(dir, "train " + config + " --folds 3 --resume two", {"--resume: two is one run"});
  std::filesystem::create_directories(dir / "empty");
  expect_user_error(dir, "train " + config + " --folds 3 --resume empty",
                    {"--resume: empty holds none of fold-1 to fold-3 to continue"});
  expect_user_error(dir, "train " + config + " --set data.folds=3 --set data.fold=4 --output x", {"data.fold"});
}

}  // namespace tctl::cli_test
