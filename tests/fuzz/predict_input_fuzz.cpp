// libFuzzer harness: a CSV as `predict --input` and `evaluate --data` read it for a trained run. The runs are
// trained once, for one epoch, in LLVMFuzzerInitialize: configs/iris_species.json (classes by name),
// configs/iris_mlp.json (classes by number) and configs/diabetes_regression.json (a regression); each input is
// read for each of them as it is, and keeping its first column as predict's --keep-columns would. Reading may
// refuse the rows; predicting and evaluating what it read must then succeed (tests/fuzz/run_checks.h).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "models/record/train_config.h"
#include "models/run/loaded_run.h"
#include "models/train/training_run.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/run_checks.h"

namespace {
const tctl::fuzz::ScratchDir& scratch() {
  static const tctl::fuzz::ScratchDir dir;
  return dir;
}

std::vector<std::unique_ptr<tctl::LoadedRun>>& runs() {
  static std::vector<std::unique_ptr<tctl::LoadedRun>> loaded;
  return loaded;
}

// The input's first column by its header, when the header starts with a plain name: what a user would pass
// to --keep-columns.
std::vector<std::string> first_column(std::string_view text, bool header) {
  const std::string_view name = text.substr(0, text.find_first_of(",\r\n"));
  if (!header || name.empty() || name.find('"') != std::string_view::npos) return {};
  return {std::string(name)};
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::filesystem::path configs = std::filesystem::path(TENSORCTL_SOURCE_DIR) / "configs";
  for (const char* name : {"iris_species", "iris_mlp", "diabetes_regression"}) {
    tctl::TrainConfig config = tctl::load_train_config((configs / (std::string(name) + ".json")).string());
    config.epochs = 1;
    config.output = (scratch().path() / name).string();
    config.inter_op_threads = 1;
    config.intra_op_threads = 1;
    (void)tctl::train_and_save(config, {}, {});
    runs().push_back(std::make_unique<tctl::LoadedRun>(tctl::load_run(config.output, 1, 1)));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = tctl::fuzz::as_text(data, size);
  const std::string csv = scratch().write("input.csv", text);
  for (const auto& run : runs()) {
    tctl::fuzz::accept_refusal([&] { tctl::fuzz::use_rows(*run, csv); });
    const std::vector<std::string> keep = first_column(text, run->config.data.header);
    if (!keep.empty()) tctl::fuzz::accept_refusal([&] { tctl::fuzz::use_rows(*run, csv, keep); });
  }
  return 0;
}
