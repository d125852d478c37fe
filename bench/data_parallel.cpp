// bench_data_parallel: data-parallel training speed of the MLP 784-512-512-10 (Adam) at one global batch,
// and the all-reduce alone against MPI's own. Prints one JSON line per measurement (rank 0 alone under
// mpirun); bench/compare_data_parallel.sh runs it against PyTorch DistributedDataParallel.
//
//   bench_data_parallel --replicas N [--batch 256] [--steps 20] [--rounds 5] [--threads T] [--bucket BYTES]
//       one process: N mirrored replicas (1: no strategy), T threads per replica's pools, gradients fused
//       into all-reduces of up to BYTES (4 MiB)
//   mpirun -np N bench_data_parallel --workers [same options]
//       N processes, multi-worker over MPI, one replica each
//   mpirun -np N bench_data_parallel --allreduce BYTES [--reps 200]
//       MPI_Allreduce of BYTES alone in a loop, then MpiWorld::all_reduce of the same buffer (the weighted
//       products, arrival notices and polling included): median microseconds and bus bandwidth each
//
// A training figure is the median over rounds of `steps` steps each (after 5 warm-up steps) of the time
// per step; all-reduce seconds per step come from the model's own counters over the same steps.
#include <fmt/format.h>

#include <cstring>
#include <random>
#include <string>

#include "bench/bench_util.h"
#include "core/mpi_world.h"
#include "models/train/model.h"

#if TENSORCTL_WITH_MPI
#include <mpi.h>
#endif

namespace {

using namespace tctl;

const char* kMlp784 = R"({"input_shape": [784], "layers": [{"type": "Dense", "units": 512, "activation": "relu"},
  {"type": "Dense", "units": 512, "activation": "relu"}, {"type": "Dense", "units": 10, "activation": "softmax"}]})";

struct Options {
  int replicas = 1;
  bool workers = false;
  std::int64_t allreduce_bytes = 0;
  std::int64_t batch = 256;
  int steps = 20;
  int rounds = 5;
  int threads = 1;
  int reps = 200;
  std::int64_t bucket = std::int64_t{4} << 20;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return std::string(argv[++i]);
    };
    if (a == "--replicas")
      o.replicas = std::stoi(next());
    else if (a == "--workers")
      o.workers = true;
    else if (a == "--allreduce")
      o.allreduce_bytes = std::stoll(next());
    else if (a == "--batch")
      o.batch = std::stoll(next());
    else if (a == "--steps")
      o.steps = std::stoi(next());
    else if (a == "--rounds")
      o.rounds = std::stoi(next());
    else if (a == "--threads")
      o.threads = std::stoi(next());
    else if (a == "--reps")
      o.reps = std::stoi(next());
    else if (a == "--bucket")
      o.bucket = std::stoll(next());
    else
      throw std::runtime_error("unknown option " + a);
  }
  return o;
}

int train(const Options& o) {
  std::shared_ptr<MpiWorld> world;
  if (o.workers) world = MpiWorld::get(MpiWorld::Seconds(600));
  const int replicas = o.workers ? 1 : o.replicas;
  ModelOptions mo;
  mo.optimizer.type = "adam";
  mo.optimizer.epsilon = 1e-7;
  mo.inter_op_threads = o.threads;
  mo.intra_op_threads = o.threads;
  mo.bucket_bytes = o.bucket;
  if (replicas > 1) mo.replica_devices.assign(static_cast<std::size_t>(replicas), "cpu");
  if (world) {
    mo.workers = world;
    mo.worker = world->rank();
  }
  std::vector<std::shared_ptr<Sequential>> nets;
  for (int r = 0; r < replicas; ++r)
    nets.push_back(std::make_shared<Sequential>(Sequential::from_json(nlohmann::json::parse(kMlp784), "m", "", 1)));
  Model model(std::move(nets), mo);

  // Eight batches of synthetic rows, the same on every worker.
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<Tensor> xs, ys;
  for (int b = 0; b < 8; ++b) {
    std::vector<float> x(static_cast<std::size_t>(o.batch * 784));
    for (float& v : x) v = normal(rng);
    std::vector<std::int32_t> y(static_cast<std::size_t>(o.batch));
    for (auto& v : y) v = static_cast<std::int32_t>(rng() % 10);
    // A worker reads only its rows of each batch, as `train` feeds it (Model::local_rows).
    const auto [first, count] = model.local_rows(o.batch);
    std::vector<std::int64_t> rows(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) rows[static_cast<std::size_t>(i)] = first + i;
    Tensor bx, by;
    xs.push_back(gather_rows(Tensor::from_floats(Shape{o.batch, 784}, x), rows, bx));
    ys.push_back(gather_rows(Tensor::from_ints(Shape{o.batch}, y), rows, by));
  }
  std::int64_t step = 0;
  auto run = [&](int n) {
    for (int i = 0; i < n; ++i, ++step) model.train_batch(xs[step % 8], ys[step % 8], step, o.batch);
  };
  run(5);
  std::vector<double> step_seconds, reduce_seconds;
  for (int r = 0; r < o.rounds; ++r) {
    const AllReduceTotals before = model.all_reduce_totals();
    const auto t0 = std::chrono::steady_clock::now();
    run(o.steps);
    step_seconds.push_back(bench::seconds_since(t0) / o.steps);
    reduce_seconds.push_back((model.all_reduce_totals().seconds - before.seconds) / o.steps);
  }
  const AllReduceTotals t = model.all_reduce_totals();
  if (world && world->rank() != 0) return 0;
  const double s = bench::median(step_seconds);
  fmt::print(
      "{{\"impl\": \"tensorctl\", \"mode\": \"{}\", \"replicas\": {}, \"batch\": {}, \"threads_per_replica\": {}, "
      "\"bucket_bytes\": {}, \"step_ms\": {:.4f}, \"samples_per_s\": {:.1f}, \"allreduce_ms\": {:.4f}, "
      "\"allreduce_bytes_per_step\": {}}}\n",
      o.workers ? "multi-worker" : (replicas > 1 ? "mirrored" : "single"), model.members(), o.batch, o.threads,
      o.bucket, s * 1e3, static_cast<double>(o.batch) / s, bench::median(reduce_seconds) * 1e3,
      t.steps > 0 ? t.bytes / t.steps : 0);
  return 0;
}

#if TENSORCTL_WITH_MPI
int allreduce(const Options& o) {
  auto world = MpiWorld::get(MpiWorld::Seconds(600));
  const auto n = static_cast<std::int64_t>(o.allreduce_bytes / 4);
  std::vector<float> in(static_cast<std::size_t>(n), 1.0f), out(static_cast<std::size_t>(n));
  auto time = [&](auto&& fn) {
    for (int i = 0; i < 10; ++i) fn(i);
    std::vector<double> us;
    for (int i = 0; i < o.reps; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      const auto t0 = std::chrono::steady_clock::now();
      fn(i);
      us.push_back(bench::seconds_since(t0) * 1e6);
    }
    return bench::median(us);
  };
  const double raw = time([&](int) {
    std::memcpy(out.data(), in.data(), in.size() * 4);
    MPI_Allreduce(MPI_IN_PLACE, out.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  });
  std::int64_t key = 0;
  const double ours = time([&](int) {
    world->all_reduce(world->rank(), collective_key(key++, 0), in.data(), n, 0.5f, out.data(), "bench");
  });
  if (world->rank() != 0) return 0;
  // Bus bandwidth as the OSU and nccl-tests report it: bytes x 2(p-1)/p over the time.
  const int p = world->members();
  const double factor = 2.0 * (p - 1) / p;
  fmt::print(
      "{{\"impl\": \"allreduce\", \"ranks\": {}, \"bytes\": {}, \"mpi_us\": {:.2f}, \"tensorctl_us\": {:.2f}, "
      "\"mpi_busbw_gbs\": {:.3f}, \"tensorctl_busbw_gbs\": {:.3f}}}\n",
      p, o.allreduce_bytes, raw, ours, o.allreduce_bytes * factor / raw / 1e3, o.allreduce_bytes * factor / ours / 1e3);
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    int status = 0;
    if (o.allreduce_bytes > 0) {
#if TENSORCTL_WITH_MPI
      status = allreduce(o);
#else
      throw std::runtime_error("--allreduce needs a build with MPI");
#endif
    } else {
      status = train(o);
    }
    mpi_finalize();
    return status;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_data_parallel: {}\n", e.what());
    return 1;
  }
}
