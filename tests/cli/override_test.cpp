// `train --set KEY=VALUE` end to end (models/record/config_override.h): overrides of the config's keys and of
// its model spec's train the bits of a config file edited to the same values, and the run records them; a
// wrong key, type or path is one line naming it, exit 2, nothing written; --resume holds overrides to the
// rules it holds a changed file to, and the command it prints to resume an interrupted run carries them.
#include <doctest/doctest.h>

#include "cli/cli_test_util.h"

namespace tctl::cli_test {
namespace {

// configs/digits_mlp.json in `dir` as `name` (2 epochs), its model spec copied beside it, with
// `config_changes` merged into the config and `spec_changes` into the spec's second layer.
void write_digits_config(const TempDir& dir, const std::string& name, const nlohmann::json& config_changes = {},
                         const nlohmann::json& spec_changes = {}) {
  nlohmann::json c = read_json(source_path("configs/digits_mlp.json"));
  nlohmann::json spec = read_json(source_path("configs/" + c["model"].get<std::string>()));
  c["model"] = name + ".model.json";
  c["epochs"] = 2;
  if (!config_changes.is_null()) c.merge_patch(config_changes);
  if (!spec_changes.is_null()) spec["layers"][1].merge_patch(spec_changes);
  dir.write(name + ".model.json", spec.dump(2));
  dir.write(name, c.dump(2));
}

}  // namespace

TEST_SUITE("overrides") {
  TEST_CASE("--set changes config and model spec keys as an edited file would, and the run records them") {
    TempDir dir;
    write_digits_config(dir, "base.json");
    write_digits_config(dir, "edited.json", {{"optimizer", {{"learning_rate", 0.003}}}, {"batch_size", 16}},
                        {{"units", 48}});
    // The config given after a --set: each --set takes one value.
    const CommandResult r = run_tensorctl(
        "train --set optimizer.learning_rate=3e-3 --set layers[1].units=48 base.json --set batch_size=16 "
        "--output set --quiet",
        dir.path());
    INFO(r.err);
    REQUIRE(r.status == 0);
    REQUIRE(run_tensorctl("train edited.json --output edited --quiet", dir.path()).status == 0);
    CHECK(read_text(dir / "set/weights.safetensors") == read_text(dir / "edited/weights.safetensors"));
    const nlohmann::json config = read_json(dir / "set/summary.json").at("config");
    CHECK(config.at("optimizer").at("learning_rate") == 0.003);
    CHECK(config.at("batch_size") == 16);
    CHECK(config.at("model").at("layers").at(1).at("units") == 48);
    CHECK(read_json(dir / "set/model.json").at("layers").at(1).at("units") == 48);
    // A string needs no quotes; a path is the config's, relative to its folder.
    dir.write("renamed.csv", read_text(source_path("configs/data/iris.csv")));
    const CommandResult csv = run_tensorctl(
        "train base.json --set data=null --set data.csv=renamed.csv "
        "--set input_shape=[4] --set layers[3].units=3 --output iris --quiet",
        dir.path());
    INFO(csv.err);
    CHECK(csv.status == 0);
  }

  TEST_CASE("a wrong --set key, value or path is one line naming it, exit 2, nothing written") {
    TempDir dir;
    write_digits_config(dir, "base.json");
    expect_user_error(dir, "train base.json --set optimizer.learning_rat=1 --output run",
                      {"base.json: optimizer.learning_rat: unknown key"});
    expect_user_error(dir, "train base.json --set layers[1].units=many --output run",
                      {"base.json.model.json: layers[1].units: expected a positive integer, got \"many\""});
    expect_user_error(dir, "train base.json --set layers[9].units=3 --output run",
                      {"--set layers[9].units: layers has 4 entries, so no [9]"});
    expect_user_error(dir, "train base.json --set epochs.count=3 --output run",
                      {"--set epochs.count: epochs is no object with keys: got 2"});
    expect_user_error(dir, "train base.json --set epochs --output run", {"--set: expected KEY=VALUE, got \"epochs\""});
    expect_user_error(dir, "train base.json --set a..b=1 --output run", {"--set: \"a..b\" is no key path"});
  }

  TEST_CASE("--resume treats an override as a change to the file; the same overrides resume") {
    TempDir dir;
    write_digits_config(dir, "base.json");
    REQUIRE(
        run_tensorctl("train base.json --set optimizer.learning_rate=0.002 --epochs 1 --output run --quiet", dir.path())
            .status == 0);
    const CommandResult changed = run_tensorctl("train base.json --resume run --quiet", dir.path());
    CHECK(changed.status == 2);
    CHECK(changed.err.find("optimizer.learning_rate") != std::string::npos);
    CHECK(
        run_tensorctl("train base.json --set optimizer.learning_rate=0.002 --resume run --quiet", dir.path()).status ==
        0);
    CHECK(read_json(dir / "run/summary.json").at("epochs_run") == 2);
  }
}

}  // namespace tctl::cli_test
