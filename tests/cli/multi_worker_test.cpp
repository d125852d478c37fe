// Multi-worker training end to end, under a real `mpirun` on this machine (Open MPI, two processes on
// localhost): the same bits as two mirrored replicas in one process, rank 0 alone writing and speaking, a
// resumed run equal to one that never stopped, a stalled worker named by the others' timeout, and the
// mistakes that exit 2. Skipped, with the reason, in a build without MPI, without mpirun, and under the
// sanitizers (Open MPI's own allocations and threads are not ours to report).
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cstdlib>

#include "cli/cli_test_util.h"
#include "core/mpi_world.h"

using namespace tctl::cli_test;

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// Why the mpirun tests cannot run here, or "".
std::string why_no_mpirun() {
  if (!tctl::mpi_built()) return "this build has no MPI";
  if (kSanitized) return "under a sanitizer";
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) return "no mpirun on the PATH";
  return "";
}

// Whether the mpirun tests can run; when not, says why as the test's message ("skipped: ...").
bool mpirun_ready() {
  const std::string why = why_no_mpirun();
  if (!why.empty()) MESSAGE("skipped: " << why);
  return why.empty();
}

// `mpirun --oversubscribe -np N tensorctl ARGS` in `dir` (allowed as root, as CI runs), with `env` before it;
// at most 120 s. `args` may hold ": -np 1 ..." parts of its own: the binary is spelt $TENSORCTL there.
CommandResult run_mpirun(int np, const std::string& args, const TempDir& dir, const std::string& env = "") {
  const std::string binary = quoted(TENSORCTL_BINARY);
  std::string rest = args;
  for (std::size_t at = rest.find("$TENSORCTL"); at != std::string::npos; at = rest.find("$TENSORCTL"))
    rest.replace(at, 10, binary);
  const std::string command =
      "cd " + quoted(dir.path()) +
      " && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 " + env +
      " timeout 120 mpirun --oversubscribe -np " + std::to_string(np) + " " + binary + " " + rest + " >" +
      quoted(dir / "mpi.out") + " 2>" + quoted(dir / "mpi.err") + " </dev/null";
  const int raw = std::system(command.c_str());
  CommandResult r;
  if (raw != -1 && WIFEXITED(raw)) r.status = WEXITSTATUS(raw);
  r.out = read_text(dir / "mpi.out");
  r.err = read_text(dir / "mpi.err");
  std::filesystem::remove(dir / "mpi.out");
  std::filesystem::remove(dir / "mpi.err");
  INFO("mpirun -np " << np << " tensorctl " << args);
  INFO("stderr: " << r.err);
  CHECK(r.status != 124);  // timeout's: the job hung
  return r;
}

// The digits MLP config with a strategy, 3 epochs.
std::string digits_config(const nlohmann::json& strategy, std::int64_t batch_size = 32) {
  nlohmann::json c = read_json(source_path("configs/digits_mlp.json"));
  c["model"] = source_path("configs/" + c["model"].get<std::string>()).string();
  c["strategy"] = strategy;
  c["epochs"] = 3;
  c["batch_size"] = batch_size;
  return c.dump(2);
}

std::vector<std::string> history_rows(const std::filesystem::path& run) {
  std::vector<std::string> out;
  for (const auto& line : split_lines(read_text(run / "history.csv"))) out.push_back(line.substr(0, line.rfind(',')));
  return out;
}

const nlohmann::json kWorkers = {{"type", "multi-worker"}};

}  // namespace

TEST_CASE("mpirun -np 2 multi-worker trains the bits of 2 mirrored replicas; rank 0 alone writes and prints") {
  if (!mpirun_ready()) return;
  TempDir dir;
  dir.write("mirrored.json", digits_config({{"type", "mirrored"}, {"replicas", 2}}));
  dir.write("workers.json", digits_config(kWorkers));
  REQUIRE(run_tensorctl("train mirrored.json --output mirrored --quiet", dir.path()).status == 0);
  const CommandResult r = run_mpirun(2, "train workers.json --output workers", dir);
  REQUIRE(r.status == 0);
  CHECK(read_text(dir / "workers/weights.safetensors") == read_text(dir / "mirrored/weights.safetensors"));
  CHECK(history_rows(dir / "workers") == history_rows(dir / "mirrored"));
  // One voice: rank 1 prints nothing.
  std::size_t trained = 0;
  for (const auto& line : split_lines(r.out)) trained += line.rfind("Trained digits_mlp", 0) == 0 ? 1 : 0;
  CHECK(trained == 1);
  CHECK(r.out.find("Multi-worker over 2 workers: all-reduce of ") != std::string::npos);
  const nlohmann::json s = read_json(dir / "workers/summary.json");
  CHECK(s.at("strategy").at("type") == "multi-worker");
  CHECK(s.at("strategy").at("replicas") == 2);
  CHECK(s.at("test").at("accuracy") == read_json(dir / "mirrored/summary.json").at("test").at("accuracy"));
}

TEST_CASE(
    "a multi-worker run resumed by every rank from rank 0's checkpoint gives the bits of one that never stopped") {
  if (!mpirun_ready()) return;
  TempDir dir;
  dir.write("workers.json", digits_config(kWorkers));
  REQUIRE(run_mpirun(2, "train workers.json --output straight --quiet", dir).status == 0);
  REQUIRE(run_mpirun(2, "train workers.json --epochs 1 --output resumed --quiet", dir).status == 0);
  REQUIRE(run_mpirun(2, "train workers.json --resume resumed --quiet", dir).status == 0);
  CHECK(read_text(dir / "straight/weights.safetensors") == read_text(dir / "resumed/weights.safetensors"));
}

TEST_CASE("a worker that stalls is named by the others' timeout, one line, and the job ends") {
  if (!mpirun_ready()) return;
  TempDir dir;
  dir.write("workers.json", digits_config({{"type", "multi-worker"}, {"timeout_seconds", 1}}));
  // Rank 1 stops for good before its fifth all-reduce: the first two broadcast rank 0's weights (when the
  // model is made, and when training starts), then each step has its gradients' and its results'; the
  // fifth is step 1's gradients.
  const CommandResult r = run_mpirun(2, "train workers.json --output run --quiet", dir, "TCTL_MPI_STALL=1:5");
  CHECK(r.status != 0);
  CHECK(r.err.find("error: all-reduce of all_reduce/AllReduce at step 1: rank 1 of 2 did not arrive within 1 s\n") !=
        std::string::npos);
}

TEST_CASE(
    "multi-worker mistakes exit 2 naming the key: no mpirun, workers that do not divide the batch, configs "
    "that differ between ranks") {
  TempDir dir;
  dir.write("workers.json", digits_config(kWorkers));
  // Without mpirun (whether or not this build has MPI).
  expect_user_error(dir, "train workers.json", {"workers.json", "strategy.type"});
  if (const std::string why = why_no_mpirun(); !why.empty()) {
    MESSAGE("the mpirun cases skipped: " << why);
    return;
  }
  CommandResult r = run_mpirun(3, "train workers.json --output run --quiet", dir);
  CHECK(r.status == 2);
  CHECK(r.err.find("error: workers.json: batch_size: 3 workers do not divide batch_size 32") != std::string::npos);
  CHECK(!std::filesystem::exists(dir / "run"));
  r = run_mpirun(1,
                 "train workers.json --output run --quiet : -np 1 $TENSORCTL train workers.json --output run --quiet "
                 "--epochs 4",
                 dir);
  CHECK(r.status == 2);
  CHECK(r.err.find("error: workers.json: rank 1 resolved another config than rank 0") != std::string::npos);
  CHECK(!std::filesystem::exists(dir / "run"));
}
