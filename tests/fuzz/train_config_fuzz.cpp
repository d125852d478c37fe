// libFuzzer harness: a train config as `tensorctl train` reads it. The input is written to a file in a scratch
// folder (load_train_config takes a path and resolves the model and data paths inside the config against its
// folder), beside links to configs/models and configs/data so that the seeds' "models/iris_mlp.json" resolve;
// then load_train_config and the resolved config that summary.json and the checkpoint record.
#include <cstddef>
#include <cstdint>
#include <filesystem>

#include "models/record/train_config.h"
#include "tests/fuzz/fuzz_util.h"

namespace {
const tctl::fuzz::ScratchDir& scratch() {
  static const tctl::fuzz::ScratchDir dir;
  return dir;
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::filesystem::path configs = std::filesystem::path(TENSORCTL_SOURCE_DIR) / "configs";
  std::filesystem::create_directory_symlink(configs / "models", scratch().path() / "models");
  std::filesystem::create_directory_symlink(configs / "data", scratch().path() / "data");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = scratch().write("config.json", tctl::fuzz::as_text(data, size));
  tctl::fuzz::accept_refusal([&] {
    const tctl::TrainConfig config = tctl::load_train_config(path);
    (void)config.to_json().dump();
  });
  return 0;
}
