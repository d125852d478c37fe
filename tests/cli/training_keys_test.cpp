// The training keys Keras users reach for, end to end on the digits MLP: gradient accumulation trains the
// weights of a batch that many times larger, use_ema validates, tests and saves the averaged weights while
// the checkpoint keeps both, and class_weight weighs the classes; their mistakes are one line naming the key.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "cli/cli_test_util.h"
#include "core/compute_type.h"
#include "models/io/safetensors.h"
#include "models/scoped_env.h"

namespace tctl::cli_test {
namespace {

// configs/digits_mlp.json in `dir` as base.json, its model spec beside it, without dropout (whose masks are
// drawn per step, so batches of 8 and of 32 would draw different ones).
void write_config(const TempDir& dir) {
  nlohmann::json c = read_json(source_path("configs/digits_mlp.json"));
  nlohmann::json spec = read_json(source_path("configs/" + c["model"].get<std::string>()));
  spec["layers"][2]["rate"] = 0.0;
  c["model"] = "base.model.json";
  c["epochs"] = 3;
  dir.write("base.model.json", spec.dump(2));
  dir.write("base.json", c.dump(2));
}

std::map<std::string, std::vector<float>> tensors(const std::filesystem::path& file, const std::string& prefix = "") {
  std::map<std::string, std::vector<float>> out;
  for (const NamedTensor& t : load_safetensors(file).tensors)
    if (t.name.rfind(prefix, 0) == 0) out[t.name.substr(prefix.size())] = t.value.to_floats();
  return out;
}

float max_difference(const std::map<std::string, std::vector<float>>& a,
                     const std::map<std::string, std::vector<float>>& b) {
  REQUIRE(a.size() == b.size());
  float most = 0.0f;
  for (const auto& [name, values] : a) {
    REQUIRE(b.count(name) == 1);
    const std::vector<float>& other = b.at(name);
    REQUIRE(values.size() == other.size());
    for (std::size_t i = 0; i < values.size(); ++i) most = std::max(most, std::abs(values[i] - other[i]));
  }
  return most;
}

}  // namespace

TEST_SUITE("training keys") {
  TEST_CASE("gradient_accumulation_steps 4 at batch 8 trains the weights of batch 32") {
    TempDir dir;
    write_config(dir);
    REQUIRE(run_tensorctl("train base.json --set batch_size=32 --output large --quiet", dir.path()).status == 0);
    const CommandResult r = run_tensorctl(
        "train base.json --set batch_size=8 --set optimizer.gradient_accumulation_steps=4 --output accumulated --quiet",
        dir.path());
    INFO(r.err);
    REQUIRE(r.status == 0);
    REQUIRE(run_tensorctl("train base.json --set batch_size=8 --output small --quiet", dir.path()).status == 0);
    const auto large = tensors(dir / "large/weights.safetensors");
    const float accumulated = max_difference(tensors(dir / "accumulated/weights.safetensors"), large);
    const float small = max_difference(tensors(dir / "small/weights.safetensors"), large);
    INFO("accumulated " << accumulated << ", small batches " << small);
    CHECK(accumulated < 1e-5f);
    CHECK(small > 1e-2f);
    CHECK(read_json(dir / "accumulated/summary.json")["config"]["optimizer"]["gradient_accumulation_steps"] == 4);
  }

  TEST_CASE("use_ema saves the averaged weights, and the checkpoint keeps weights and averages to resume") {
    TempDir dir;
    write_config(dir);
    const std::string args = "train base.json --set optimizer.use_ema=true --set optimizer.ema_momentum=0.9 ";
    const CommandResult r = run_tensorctl(args + "--output ema --quiet", dir.path());
    INFO(r.err);
    REQUIRE(r.status == 0);
    auto check_saved = [&] {
      const auto saved = tensors(dir / "ema/weights.safetensors");
      const auto averages = tensors(dir / "ema/checkpoint.safetensors", "optimizer/");
      std::map<std::string, std::vector<float>> averaged;
      for (const auto& [name, values] : averages)
        if (name.size() > 8 && name.substr(name.size() - 8) == "/average")
          averaged[name.substr(0, name.size() - 8)] = values;
      CHECK(max_difference(saved, averaged) == 0.0f);
      std::map<std::string, std::vector<float>> raw;
      for (const auto& [name, values] : tensors(dir / "ema/checkpoint.safetensors"))
        if (saved.count(name) == 1) raw[name] = values;
      CHECK(max_difference(saved, raw) > 1e-4f);
    };
    check_saved();
    // Resumed, training goes on from the weights, not the averages, and saves the new averages.
    const CommandResult resumed = run_tensorctl(args + "--resume ema --epochs 4 --quiet", dir.path());
    INFO(resumed.err);
    REQUIRE(resumed.status == 0);
    check_saved();
  }

  TEST_CASE("class_weight: balanced or a map trains and is recorded; a class the data lacks is exit 2") {
    TempDir dir;
    write_config(dir);
    const CommandResult r =
        run_tensorctl(R"(train base.json --set 'class_weight={"0":5,"3":0.5}' --output mapped --quiet)", dir.path());
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK(read_json(dir / "mapped/summary.json")["config"]["class_weight"] == nlohmann::json{{"0", 5}, {"3", 0.5}});
    REQUIRE(
        run_tensorctl(R"(train base.json --set class_weight=balanced --output balanced --quiet)", dir.path()).status ==
        0);
    REQUIRE(run_tensorctl("train base.json --output plain --quiet", dir.path()).status == 0);
    CHECK(read_text(dir / "mapped/weights.safetensors") != read_text(dir / "plain/weights.safetensors"));
    expect_user_error(dir, R"(train base.json --set 'class_weight={"12":2}' --output bad)",
                      {"base.json: class_weight.12: the data has no class 12: its classes are 0 to 9"});
    expect_user_error(dir, R"(train base.json --set 'class_weight={"1":-2}' --output bad)",
                      {"base.json: class_weight.1: expected a weight of 0 or more"});
    expect_user_error(dir, R"(train base.json --set loss=mse --set class_weight=balanced --output bad)",
                      {"class_weight: class weights need a classification loss"});
  }
  TEST_CASE("--precision: mixed_float16 keeps float32's weights on the CPU, mixed_bfloat16 uses AVX-512 BF16") {
    TempDir dir;
    write_config(dir);
    const CommandResult plain = run_tensorctl("train base.json --output f32 --quiet", dir.path());
    REQUIRE(plain.status == 0);
    const CommandResult mixed = run_tensorctl("train base.json --precision mixed_float16 --output f16", dir.path());
    REQUIRE(mixed.status == 0);
    CHECK(mixed.out.find("precision mixed_float16: cpu computes it in float32") != std::string::npos);
    CHECK(tensors(dir / "f32" / "weights.safetensors") == tensors(dir / "f16" / "weights.safetensors"));
    const std::string history = read_text(dir / "f16" / "history.csv");
    CHECK(history.rfind("epoch,loss,accuracy,skipped_steps,loss_scale,", 0) == 0);
    CHECK(history.find("\n3,") != std::string::npos);
    const nlohmann::json summary = read_json(dir / "f16" / "summary.json");
    CHECK(summary["config"]["precision"] == "mixed_float16");
    CHECK(summary["config"]["loss_scale"]["initial_scale"] == 32768.0);
    CHECK(summary["train"]["skipped_steps"] == 0.0);
    CHECK_FALSE(read_json(dir / "f32" / "summary.json")["config"].contains("precision"));  // as before precisions
    const CommandResult bf16 = run_tensorctl("train base.json --precision mixed_bfloat16 --output bf16", dir.path());
    if (cpu_bf16_products()) {
      // AVX-512 BF16: the dense products read bfloat16 (kernels/cpu/bf16_product.h), the same bits on one
      // thread or two, near float32's accuracy.
      CHECK(bf16.out.find("precision mixed_bfloat16: cpu's dense products read bfloat16 operands (AVX-512 BF16)") !=
            std::string::npos);
      CHECK(tensors(dir / "f32" / "weights.safetensors") != tensors(dir / "bf16" / "weights.safetensors"));
      REQUIRE(run_tensorctl("train base.json --precision mixed_bfloat16 --intra-op-threads 2 --output bf16_2 --quiet",
                            dir.path())
                  .status == 0);
      CHECK(read_text(dir / "bf16_2" / "weights.safetensors") == read_text(dir / "bf16" / "weights.safetensors"));
      const auto accuracy = [&](const char* out) {
        return read_json(dir / out / "summary.json")["test"]["accuracy"].get<double>();
      };
      CHECK(std::abs(accuracy("bf16") - accuracy("f32")) <= 0.01);
      // TCTL_CPU_BF16=0 keeps float32 on such a processor: float32's very weights, and the line says so.
      const CommandResult off = [&] {
        const tctl::testing::ScopedEnv keep_float32("TCTL_CPU_BF16", "0");
        return run_tensorctl("train base.json --precision mixed_bfloat16 --output bf16_off", dir.path());
      }();
      CHECK(off.out.find("precision mixed_bfloat16: cpu computes it in float32 (no bfloat16 products here") !=
            std::string::npos);
      CHECK(tensors(dir / "f32" / "weights.safetensors") == tensors(dir / "bf16_off" / "weights.safetensors"));
    } else {
      CHECK(bf16.out.find("precision mixed_bfloat16: cpu computes it in float32") != std::string::npos);
      CHECK(tensors(dir / "f32" / "weights.safetensors") == tensors(dir / "bf16" / "weights.safetensors"));
    }
    expect_user_error(dir, "train base.json --precision float16 --output bad", {"--precision", "float16"});
    expect_user_error(dir, "train base.json --set 'loss_scale={\"initial_scale\":8}' --output bad",
                      {"base.json: loss_scale: loss scaling is part of the mixed_float16 precision"});
  }
  TEST_CASE("--precision on sim:0 rounds the products' operands as a GPU does, near float32's accuracy") {
    // sim:0 runs the digits MLP's dense layers, loss and Adam; its products read bfloat16 or float16 operands
    // (core/compute_type.h). The issue's bar for accuracy is 0.5 percentage points of float32.
    TempDir dir;
    write_config(dir);
    const auto test_accuracy = [&](const std::string& out) {
      return read_json(dir / out / "summary.json")["test"]["accuracy"].get<double>();
    };
    REQUIRE(run_tensorctl("train base.json --device sim:0 --output f32 --quiet", dir.path()).status == 0);
    for (const std::string precision : {"mixed_bfloat16", "mixed_float16"}) {
      CAPTURE(precision);
      const CommandResult r = run_tensorctl(
          "train base.json --device sim:0 --precision " + precision + " --output " + precision, dir.path());
      INFO(r.err);
      REQUIRE(r.status == 0);
      const std::string type = precision == "mixed_bfloat16" ? "bfloat16" : "float16";
      CHECK(r.out.find("precision " + precision + ": products on sim:0 read " + type +
                       " operands and sum in float32") != std::string::npos);
      MESSAGE(precision << ": test accuracy " << test_accuracy(precision) << ", float32 " << test_accuracy("f32"));
      CHECK(std::abs(test_accuracy(precision) - test_accuracy("f32")) <= 0.01);
      CHECK(tensors(dir / precision / "weights.safetensors") != tensors(dir / "f32" / "weights.safetensors"));
      REQUIRE(run_tensorctl("train base.json --device sim:0 --precision " + precision + " --output again --quiet",
                            dir.path())
                  .status == 0);
      CHECK(read_text(dir / "again" / "weights.safetensors") == read_text(dir / precision / "weights.safetensors"));
      std::filesystem::remove_all(dir / "again");
    }
    // The shipped digits CNN: its convolutions, pooling and dense layers run on sim:0, the products rounded.
    const std::string cnn = "train " + quoted(source_path("configs/digits_cnn.json")) + " --device sim:0 --quiet";
    REQUIRE(run_tensorctl(cnn + " --output cnn_f32", dir.path()).status == 0);
    for (const std::string precision : {"mixed_bfloat16", "mixed_float16"}) {
      CAPTURE(precision);
      REQUIRE(run_tensorctl(cnn + " --precision " + precision + " --output cnn_" + precision, dir.path()).status == 0);
      MESSAGE("CNN " << precision << ": test accuracy " << test_accuracy("cnn_" + precision) << ", float32 "
                     << test_accuracy("cnn_f32"));
      CHECK(std::abs(test_accuracy("cnn_" + precision) - test_accuracy("cnn_f32")) <= 0.01);
      CHECK(tensors(dir / ("cnn_" + precision) / "weights.safetensors") !=
            tensors(dir / "cnn_f32" / "weights.safetensors"));
    }
    // A loss scale of 2^40 overflows float16's operands (past 65504) in the first steps' gradient products:
    // mixed_float16 skips those steps and halves the scale until they fit, as on a GPU. float32 products, as
    // the CPU's, never overflow at that scale.
    const std::string scale = R"( --set 'loss_scale={"initial_scale": 1099511627776}' --quiet --output )";
    REQUIRE(run_tensorctl("train base.json --device sim:0 --precision mixed_float16" + scale + "large", dir.path())
                .status == 0);
    REQUIRE(run_tensorctl("train base.json --precision mixed_float16" + scale + "large_cpu", dir.path()).status == 0);
    const std::string history = read_text(dir / "large" / "history.csv");
    INFO(history);
    CHECK(history.find("\n1,") != std::string::npos);
    CHECK(history.find(",20,1.04858e+06,") != std::string::npos);  // 20 steps skipped: 2^40 down to 2^20
    CHECK(read_json(dir / "large_cpu" / "summary.json")["train"]["skipped_steps"] == 0.0);
  }
}

}  // namespace tctl::cli_test
