// TrainConfig::from_json reads a config file and the config a run recorded with the same code.
#include "models/record/train_config.h"

#include <doctest/doctest.h>

#include "core/errors.h"
#include "spec_error_check.h"

namespace tctl {
namespace {

using testing::catch_spec_error;
using testing::check_spec_error;

// Inline model and a built-in data set, so no file is read; every key and every callback type.
const char* kConfig = R"({
  "model": {"input_shape": [4], "layers": [{"type": "Dense", "units": 3, "activation": "softmax"}]},
  "data": {"dataset": "iris", "test_split": 0.25, "validation_split": 0.2, "shuffle": false},
  "loss": "sparse_categorical_crossentropy", "optimizer": {"type": "adam", "learning_rate": 0.01},
  "metrics": ["accuracy"], "epochs": 7, "batch_size": 8, "prefetch": 3, "checkpoint_seconds": 2.5, "seed": 11,
  "threads": {"inter_op": 2, "intra_op": 1}, "device": "cpu", "output": "runs/x",
  "callbacks": [{"type": "EarlyStopping", "patience": 2, "restore_best_weights": true},
                {"type": "ModelCheckpoint", "monitor": "val_accuracy", "filename": "top.safetensors"},
                {"type": "ReduceLROnPlateau", "monitor": "loss", "factor": 0.5, "cooldown": 1, "min_lr": 0.001}]})";

}  // namespace

TEST_CASE("a run's recorded config reads back as the config it was resolved from") {
  TrainConfig c = TrainConfig::from_json(nlohmann::json::parse(kConfig), "train.json");
  c.keep_denormals = true;  // a flag at train time, recorded with the config
  const nlohmann::json recorded = c.to_json();
  const TrainConfig back = TrainConfig::from_json(recorded, "run/summary.json", "config", ConfigOrigin::kRunRecord);
  CHECK(back.to_json() == recorded);
  CHECK(back.file == "run/summary.json");
}

TEST_CASE("a bad field of a recorded config is a SpecError naming the summary and the key under config") {
  nlohmann::json recorded = TrainConfig::from_json(nlohmann::json::parse(kConfig), "train.json").to_json();
  const auto refusal = [&](const nlohmann::json& config) {
    const SpecError e = catch_spec_error(
        [&] { TrainConfig::from_json(config, "run/summary.json", "config", ConfigOrigin::kRunRecord); });
    CHECK(e.file() == "run/summary.json");
    return e.where() + ": " + e.message();
  };
  nlohmann::json bad = recorded;
  bad["batch_size"] = -3;
  CHECK(refusal(bad) == "config.batch_size: expected a positive integer, got -3");
  bad = recorded;
  bad["callbacks"][1]["monitor"] = "val_los";
  CHECK(refusal(bad).starts_with("config.callbacks[1].monitor: unknown quantity \"val_los\""));
  bad = recorded;
  bad["data"]["dataset"] = "irises";
  CHECK(refusal(bad).starts_with("config.data.dataset: unknown dataset \"irises\""));
  bad = recorded;
  bad["checkpoint_seconds"] = -1;
  CHECK(refusal(bad).starts_with("config.checkpoint_seconds: "));
  bad["checkpoint_seconds"] = "often";
  CHECK(refusal(bad) == "config.checkpoint_seconds: expected a number, got \"often\"");
  CHECK(recorded["checkpoint_seconds"] == 2.5);
  bad = recorded;
  bad["metrics"][0] = 1;
  CHECK(refusal(bad) == "config.metrics[0]: expected a string, got 1");
  // keep_denormals is recorded from a flag: a config file may not set it.
  CHECK_THROWS_AS(TrainConfig::from_json(recorded, "train.json"), SpecError);
}

TEST_CASE("a test or validation split of 1 is refused: it would leave no rows to train on") {
  for (const char* key : {"test_split", "validation_split"}) {
    CAPTURE(key);
    nlohmann::json j = nlohmann::json::parse(kConfig);
    j["data"][key] = 1.0;
    const SpecError e = check_spec_error([&] { TrainConfig::from_json(j, "train.json"); }, "train.json",
                                         std::string("data.") + key, {});
    CHECK(e.message() == "expected a number in [0.0, 1.0), got 1.0");
    j["data"][key] = 0.999;  // below 1 it is the data set's size that decides (bad_input_test.cpp)
    CHECK_NOTHROW(TrainConfig::from_json(j, "train.json"));
  }
}

TEST_CASE("the strategy: mirrored replicas read back as written, and every mistake names its key") {
  nlohmann::json j = nlohmann::json::parse(kConfig);
  CHECK(!TrainConfig::from_json(j, "train.json").to_json().contains("strategy"));  // none: as before strategies
  j["strategy"] = {{"type", "mirrored"}, {"replicas", 2}, {"devices", {"cpu", "sim:0"}}};
  const TrainConfig c = TrainConfig::from_json(j, "train.json");
  CHECK(c.strategy.type == StrategyType::kMirrored);
  CHECK(c.strategy.replicas == 2);
  CHECK(c.strategy.devices == std::vector<std::string>{"cpu", "sim:0"});
  CHECK(c.strategy.bucket_bytes == 4 << 20);
  const nlohmann::json recorded = c.to_json();
  CHECK(TrainConfig::from_json(recorded, "run/summary.json", "config", ConfigOrigin::kRunRecord).to_json() == recorded);

  const auto refusal = [&](const nlohmann::json& strategy) {
    nlohmann::json bad = nlohmann::json::parse(kConfig);
    bad["strategy"] = strategy;
    const SpecError e = catch_spec_error([&] { TrainConfig::from_json(bad, "train.json"); });
    CHECK(e.file() == "train.json");
    return e.where() + ": " + e.message();
  };
  CHECK(refusal({{"type", "mirrored"}, {"replicas", 0}}) == "strategy.replicas: expected a positive integer, got 0");
  CHECK(refusal({{"type", "mirrored"}, {"replicas", 3}}) ==
        "strategy.replicas: 3 replicas do not divide batch_size 8: each replica takes an equal share of the batch");
  CHECK(refusal({{"type", "mirrored"}, {"replicas", 2}, {"devices", {"cpu"}}}) ==
        "strategy.devices: 1 devices for 2 replicas: name one device per replica");
  CHECK(refusal({{"type", "mirrored"}, {"replicas", 2}, {"devices", {"cpu", "gpu"}}})
            .starts_with("strategy.devices[1]: unknown device \"gpu\""));
  CHECK(refusal({{"type", "mirored"}}) ==
        "strategy.type: unknown value \"mirored\" (known: none, mirrored, multi-worker, hogwild)");
  CHECK(refusal({{"type", "multi-worker"}, {"timeout_seconds", 0}}).starts_with("strategy.timeout_seconds: "));
  CHECK(refusal({{"type", "multi-worker"}, {"replicas", 2}}).starts_with("strategy.replicas: unknown key"));
  CHECK(refusal({{"type", "hogwild"}, {"workers", 3}}) ==
        "strategy.workers: 3 workers do not divide batch_size 8: each worker takes an equal share of the batch");
  CHECK(refusal({{"type", "hogwild"}, {"workers", 0}}) == "strategy.workers: expected a positive integer, got 0");
  j["strategy"] = {{"type", "hogwild"}, {"workers", 4}};
  CHECK(TrainConfig::from_json(j, "train.json").strategy.workers == 4);
  j["strategy"] = {{"type", "multi-worker"}, {"timeout_seconds", 5}};
  const TrainConfig w = TrainConfig::from_json(j, "train.json");
  CHECK(w.strategy.type == StrategyType::kMultiWorker);
  CHECK(w.strategy.timeout_seconds == 5.0);
  CHECK(TrainConfig::from_json(w.to_json(), "run/summary.json", "config", ConfigOrigin::kRunRecord).to_json() ==
        w.to_json());
  CHECK(refusal({{"type", "mirrored"}, {"replica", 2}}).starts_with("strategy.replica: unknown key"));
}

TEST_CASE("the strategy: each type reads from its JSON spelling and writes the same spelling back") {
  const std::pair<const char*, StrategyType> spellings[] = {{"none", StrategyType::kNone},
                                                            {"mirrored", StrategyType::kMirrored},
                                                            {"multi-worker", StrategyType::kMultiWorker},
                                                            {"hogwild", StrategyType::kHogwild}};
  for (const auto& [name, type] : spellings) {
    CAPTURE(name);
    nlohmann::json j = nlohmann::json::parse(kConfig);
    j["strategy"] = {{"type", name}};
    const TrainConfig c = TrainConfig::from_json(j, "train.json");
    CHECK(c.strategy.type == type);
    CHECK(strategy_type_name(type) == name);
    if (type != StrategyType::kNone) CHECK(c.to_json().at("strategy").at("type") == name);
  }
}

TEST_CASE("data.header: false reads back, is recorded only when false, and belongs to a CSV") {
  nlohmann::json j = nlohmann::json::parse(kConfig);
  j["data"] = {{"csv", "/data/iris.csv"}, {"label", "5"}, {"header", false}};
  const TrainConfig c = TrainConfig::from_json(j, "run/summary.json", "config", ConfigOrigin::kRunRecord);
  CHECK_FALSE(c.data.header);
  CHECK(c.to_json().at("data").at("header") == false);
  j["data"]["header"] = true;
  CHECK_FALSE(
      TrainConfig::from_json(j, "s.json", "config", ConfigOrigin::kRunRecord).to_json().at("data").contains("header"));
  j["data"]["header"] = "no";
  CHECK_THROWS_WITH_AS(TrainConfig::from_json(j, "s.json", "config", ConfigOrigin::kRunRecord),
                       doctest::Contains("config.data.header: expected"), SpecError);
  j["data"] = {{"dataset", "iris"}, {"header", false}};
  CHECK_THROWS_WITH_AS(TrainConfig::from_json(j, "s.json", "config", ConfigOrigin::kRunRecord),
                       doctest::Contains("header"), SpecError);
}

TEST_CASE("precision: Keras' policy names, loss_scale with mixed_float16 only, read back as written") {
  nlohmann::json j = nlohmann::json::parse(kConfig);
  TrainConfig c = TrainConfig::from_json(j, "train.json");
  CHECK(c.precision == "float32");
  CHECK_FALSE(c.optimizer.loss_scale.dynamic);
  CHECK_FALSE(c.to_json().contains("loss_scale"));
  // Absent at float32, so a run recorded before there were precisions resumes with a config that matches.
  CHECK_FALSE(c.to_json().contains("precision"));
  j["precision"] = "mixed_bfloat16";
  CHECK_FALSE(TrainConfig::from_json(j, "train.json").optimizer.loss_scale.dynamic);
  CHECK(TrainConfig::from_json(j, "train.json").to_json()["precision"] == "mixed_bfloat16");
  j["precision"] = "mixed_float16";
  c = TrainConfig::from_json(j, "train.json");
  CHECK(c.optimizer.loss_scale.dynamic);
  CHECK(c.optimizer.loss_scale.initial_scale == 32768.0);  // Keras' LossScaleOptimizer's defaults
  CHECK(c.optimizer.loss_scale.growth_steps == 2000);
  j["loss_scale"] = {{"initial_scale", 1024}, {"dynamic_growth_steps", 10}};
  c = TrainConfig::from_json(j, "train.json");
  CHECK(c.optimizer.loss_scale.initial_scale == 1024.0);
  CHECK(c.optimizer.loss_scale.growth_steps == 10);
  const TrainConfig back = TrainConfig::from_json(c.to_json(), "summary.json", "config", ConfigOrigin::kRunRecord);
  CHECK(back.precision == "mixed_float16");
  CHECK(back.optimizer.loss_scale.initial_scale == 1024.0);
  CHECK(back.optimizer.loss_scale.growth_steps == 10);

  auto refused = [&](const nlohmann::json& bad, const std::string& where) {
    return check_spec_error([&] { TrainConfig::from_json(bad, "train.json"); }, "train.json", where, {}).message();
  };
  nlohmann::json bad = j;
  bad["precision"] = "float16";
  CHECK(refused(bad, "precision").find("mixed_float16") != std::string::npos);
  bad = j;
  bad["precision"] = "mixed_bfloat16";
  CHECK(refused(bad, "loss_scale") ==
        "loss scaling is part of the mixed_float16 precision; this config's precision is mixed_bfloat16");
  bad = j;
  bad["loss_scale"]["initial_scale"] = 1e38;  // its reciprocal would be a denormal
  CHECK(refused(bad, "loss_scale.initial_scale").find("got 1e+38") != std::string::npos);
  bad = j;
  bad["loss_scale"]["dynamic_growth_steps"] = 16777217;  // the good steps count in a float
  CHECK(refused(bad, "loss_scale.dynamic_growth_steps") == "at most 16777216 (2^24), got 16777217");
  bad = j;
  bad["optimizer"]["gradient_accumulation_steps"] = 2;
  CHECK(refused(bad, "precision").find("gradient accumulation") != std::string::npos);
  bad = j;
  bad["loss_scale"]["growth"] = 3;
  CHECK_THROWS_AS(TrainConfig::from_json(bad, "train.json"), SpecError);
}

}  // namespace tctl
