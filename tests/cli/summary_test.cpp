// tensorctl summary: the Keras-style table and its --json form, for a spec, a train config and a run.
#include <doctest/doctest.h>

#include "cli/cli_test_util.h"

namespace tctl::cli_test {

TEST_SUITE("summary") {
  // digits_mlp: 64 -> 128 -> 64 -> dropout -> 10.
  constexpr std::int64_t kDigitsParams = (64 * 128 + 128) + (128 * 64 + 64) + (64 * 10 + 10);

  TEST_CASE("summary of a model spec prints the layer table and totals") {
    TempDir d;
    CommandResult r = run_tensorctl("summary " + quoted(source_path("configs/models/digits_mlp.json")), d.path());
    REQUIRE(r.status == 0);
    CHECK(r.err.empty());
    CHECK(r.out.starts_with("Model: \"digits_mlp\"\n"));
    for (const char* row : {"dense (Dense)", "dense_1 (Dense)", "dropout (Dropout)", "dense_2 (Dense)", "(None, 128)",
                            "(None, 10)", "8,320", "8,256", "650"})
      CHECK_MESSAGE(r.out.find(row) != std::string::npos, row);
    CHECK(r.out.find(" Total params: 17,226 (") != std::string::npos);
    CHECK(r.out.find(" Trainable params: 17,226 (") != std::string::npos);
    CHECK(r.out.find(" Non-trainable params: 0 (") != std::string::npos);
  }

  TEST_CASE("summary --json lists layers, shapes and parameter counts") {
    TempDir d;
    CommandResult r =
        run_tensorctl("summary --json " + quoted(source_path("configs/models/digits_mlp.json")), d.path());
    REQUIRE(r.status == 0);
    const nlohmann::json j = parse_json(r.out);
    CHECK(j.at("name") == "digits_mlp");
    CHECK(j.at("total_params") == kDigitsParams);
    CHECK(j.at("trainable_params") == kDigitsParams);
    REQUIRE(j.at("layers").size() == 4);
    const auto& first = j.at("layers")[0];
    CHECK(first.at("name") == "dense");
    CHECK(first.at("type") == "Dense");
    CHECK(first.at("output_shape") == nlohmann::json::array({-1, 128}));
    CHECK(first.at("params") == 64 * 128 + 128);
    CHECK(j.at("layers")[2].at("type") == "Dropout");
    CHECK(j.at("layers")[2].at("params") == 0);
  }

  TEST_CASE("summary of a train config and of a run directory describe the same model") {
    TempDir d;
    const std::string config = quoted(source_path("configs/iris_mlp.json"));
    CommandResult from_config = run_tensorctl("summary --json " + config, d.path());
    REQUIRE(from_config.status == 0);
    CHECK(parse_json(from_config.out).at("total_params") == (4 * 32 + 32) + (32 * 3 + 3));

    REQUIRE(run_tensorctl("train " + config + " --epochs 1 --quiet --output run", d.path()).status == 0);
    CommandResult from_run = run_tensorctl("summary --json run", d.path());
    REQUIRE(from_run.status == 0);
    CHECK(parse_json(from_run.out) == parse_json(from_config.out));
  }

  TEST_CASE("summary names layers with a given name and an Activation layer") {
    TempDir d;
    d.write("model.json", R"({"name": "named", "input_shape": [3],
    "layers": [{"type": "Dense", "units": 5, "name": "hidden", "use_bias": false}, {"type": "Activation", "activation": "tanh"}]})");
    CommandResult r = run_tensorctl("summary --json model.json", d.path());
    REQUIRE(r.status == 0);
    const nlohmann::json j = parse_json(r.out);
    CHECK(j.at("layers")[0].at("name") == "hidden");
    CHECK(j.at("layers")[0].at("params") == 15);
    CHECK(j.at("layers")[1].at("name") == "activation");
    CHECK(j.at("layers")[1].at("output_shape") == nlohmann::json::array({-1, 5}));
  }

}  // TEST_SUITE

}  // namespace tctl::cli_test
