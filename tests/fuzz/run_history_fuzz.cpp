// libFuzzer harness: the files of a run directory that `train --resume` reads besides the checkpoint. Each
// input is history.csv of a run of tests/fuzz/checkpoint_config.json checkpointed after two epochs (the
// checkpoint keeps the last epoch's row alone; the rows are history.csv's, which a resume keeps up to the
// checkpoint and rewrites once), and also the content of its tensorctl.lock (the last writer's pid, which
// the lock reads back for its messages). A resume either refuses the directory (a SpecError naming the
// file) or continues to epoch 3; then history.csv must hold its header and exactly epochs 1 to 3, in order.
//
// The seeds are that run's history.csv, and one holding a row past the checkpoint:
//   tensorctl train tests/fuzz/checkpoint_config.json --epochs 2 --output DIR  (DIR/history.csv)
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "core/errors.h"
#include "models/io/atomic_file.h"
#include "models/record/train_config.h"
#include "models/train/training_run.h"
#include "tests/fuzz/fuzz_util.h"

namespace {
const tctl::fuzz::ScratchDir& scratch() {
  static const tctl::fuzz::ScratchDir dir;
  return dir;
}

std::filesystem::path run_dir() { return scratch().path() / "run"; }
std::filesystem::path saved_dir() { return scratch().path() / "saved"; }

tctl::TrainConfig& config() {
  static tctl::TrainConfig c;
  return c;
}

// The run directory as the two-epoch run left it, but for `history` and `lock`.
void set_up_run(std::string_view history, std::string_view lock) {
  std::filesystem::remove_all(run_dir());
  std::filesystem::copy(saved_dir(), run_dir());
  scratch().write("run/history.csv", history);
  scratch().write("run/tensorctl.lock", lock);
}

void check_history() {
  const std::string text = tctl::read_file(run_dir() / "history.csv", "history.csv");
  std::size_t at = text.find('\n');
  TCTL_CHECK(at != std::string::npos, "a resumed run's history.csv without a header row");
  for (int epoch = 1; epoch <= 3; ++epoch) {
    const std::string prefix = std::to_string(epoch) + ",";
    TCTL_CHECK(text.compare(at + 1, prefix.size(), prefix) == 0, "a resumed run's history.csv out of order");
    at = text.find('\n', at + 1);
    TCTL_CHECK(at != std::string::npos, "a resumed run's history.csv row without its line end");
  }
  TCTL_CHECK(at + 1 == text.size(), "a resumed run's history.csv with rows past its last epoch");
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  config() = tctl::load_train_config(
      (std::filesystem::path(TENSORCTL_SOURCE_DIR) / "tests/fuzz/checkpoint_config.json").string());
  config().output = saved_dir().string();
  config().inter_op_threads = 1;
  config().intra_op_threads = 1;
  tctl::TrainConfig two = config();
  two.epochs = 2;
  // Stopped by its callbacks or not, the run is left with no summary: an interrupted run, which resumes.
  (void)tctl::train_and_save(two, {}, {});
  std::filesystem::remove(saved_dir() / "summary.json");
  std::filesystem::remove(saved_dir() / "weights.safetensors");
  config().output = run_dir().string();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = tctl::fuzz::as_text(data, size);
  set_up_run(text, text);
  tctl::fuzz::accept_refusal([&] {
    tctl::TrainControl control;
    control.resume = run_dir();
    const tctl::TrainOutcome out = tctl::train_and_save(config(), {}, {}, control);
    if (!out.interrupted_at) check_history();
  });
  return 0;
}
