// predict's and evaluate's code linked without models/train (tests/CMakeLists.txt links this with tctl_run
// alone): a symbol of the Model, the fit loop, the optimizers or the callbacks reached from models/run fails
// this link. Given a run directory and a train config, it evaluates the run on the config's test split as
// `tensorctl evaluate` does.
#include <cstdio>
#include <exception>

#include "models/run/loaded_run.h"
#include "models/run/run_input.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::printf("usage: run_alone RUN_DIR TRAIN_CONFIG\n");
    return argc == 1 ? 0 : 2;
  }
  try {
    tctl::LoadedRun run = tctl::load_run(argv[1], 1, 1);
    const tctl::Dataset data = tctl::read_run_test_split(run, argv[2]);
    for (const auto& [name, value] : tctl::evaluate_run(run, data, 64)) std::printf("%s %.6f\n", name.c_str(), value);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
