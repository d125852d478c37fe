// Training throughput of the digits CNN (configs/models/digits_cnn.json: two 3x3 Conv2D + MaxPooling2D
// stages, Flatten, Dense 64, Dense 10; Adam) in samples/s, batch 64 by default, on 1 and 2 threads (inter-
// and intra-op pools of that size). Prints the median of 5 timed repetitions after a warm-up, and each
// setting's speed relative to the first one measured in the same run.
//
// Usage: bench_train_cnn [--batch N] [--steps N] [--threads LIST] [--model PATH]
#include <chrono>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/bench_util.h"
#include "core/thread_pool.h"
#include "models/io/spec_reader.h"
#include "models/train/model.h"

using namespace tctl;

int main(int argc, char** argv) {
  int batch = 64, steps = 100;
  std::vector<int> threads{1, 2};
  std::string model_path = std::string(TENSORCTL_SOURCE_DIR) + "/configs/models/digits_cnn.json";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--batch") batch = std::stoi(argv[i + 1]);
    if (a == "--steps") steps = std::stoi(argv[i + 1]);
    if (a == "--threads") threads = bench::parse_list(argv[i + 1]);
    if (a == "--model") model_path = argv[i + 1];
  }
  const nlohmann::json spec = parse_json_file(model_path);
  const Sequential probe = Sequential::from_json(spec, model_path, "", 1);
  // Batches cycled in a fixed order, reshaped to the model's (8, 8, 1) images.
  const bench::Batches data = bench::digits_batches(batch, probe.input_shape());

  fmt::print("digits CNN training ({} parameters), Adam, batch {}, {} steps per repetition, median of 5\n",
             probe.param_count(), batch, steps);
  fmt::print("{:>8} {:>16} {:>14}\n", "threads", "samples/s", "vs first");
  set_flush_denormals(true);
  double first = 0.0;
  for (int t : threads) {
    ModelOptions o;
    o.inter_op_threads = t;
    o.intra_op_threads = t;
    o.seed = 1;
    Model model(std::make_shared<Sequential>(Sequential::from_json(spec, model_path, "", 1)), o);
    std::vector<double> rates;
    for (int rep = 0; rep < 6; ++rep) {
      const auto start = std::chrono::steady_clock::now();
      for (int s = 0; s < steps; ++s) {
        const std::size_t k = static_cast<std::size_t>(s) % data.xs.size();
        model.train_step(data.xs[k], data.ys[k], s);
      }
      const double elapsed = bench::seconds_since(start);
      if (rep == 0) continue;  // warm-up
      rates.push_back(steps * batch / elapsed);
    }
    const double rate = bench::median(rates);
    if (first == 0.0) first = rate;
    fmt::print("{:>8} {:>16.0f} {:>14.2f}\n", t, rate, rate / first);
  }
  return 0;
}
