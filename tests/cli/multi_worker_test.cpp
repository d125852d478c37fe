// Multi-worker training end to end, under a real `mpirun` on this machine (Open MPI, two processes on
// localhost): the same bits as two mirrored replicas in one process, rank 0 alone writing and speaking, a
// resumed run equal to one that never stopped, a stalled worker (TCTL_MPI_STALL, and a real process stopped
// by SIGSTOP) named by the others' timeout, and the mistakes that exit 2. Skipped, with the reason, in a
// build without MPI, without mpirun, and under the sanitizers (Open MPI's own allocations and threads are
// not ours to report).
#include <doctest/doctest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli/cli_test_util.h"
#include "core/mpi_world.h"

using namespace tctl::cli_test;

extern char** environ;

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

// The mpirun command line of run_mpirun, to be run by /bin/sh in `dir`, under `timeout 400` unless
// `time_limit` is false: timeout would pass a signal meant for mpirun on to it twice (to it and to its
// process group), and a second SIGINT makes mpirun kill its ranks at once.
std::string mpirun_command(int np, const std::string& args, const TempDir& dir, const std::string& env,
                           bool time_limit = true) {
  const std::string binary = quoted(TENSORCTL_BINARY);
  std::string rest = args;
  for (std::size_t at = rest.find("$TENSORCTL"); at != std::string::npos; at = rest.find("$TENSORCTL"))
    rest.replace(at, 10, binary);
  // exec, so a signal to the shell's process reaches mpirun (or timeout).
  return "cd " + quoted(dir.path()) +
         " && exec env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 " +
         env + (time_limit ? " timeout 400" : "") + " mpirun --oversubscribe -np " + std::to_string(np) + " " + binary +
         " " + rest + " >" + quoted(dir / "mpi.out") + " 2>" + quoted(dir / "mpi.err") + " </dev/null";
}

// `mpirun --oversubscribe -np N tensorctl ARGS` in `dir` (allowed as root, as CI runs), with `env` before it;
// at most 400 s. `args` may hold ": -np 1 ..." parts of its own: the binary is spelt $TENSORCTL there. The
// 200-epoch runs below take 2-7 s alone, but every step's all-reduce waits for both ranks to be scheduled:
// with two busy processes beside them on two cores, one took 208 s (25 ms an all-reduce), and 120 s, the
// limit before, failed 2 of 4 tries.
CommandResult run_mpirun(int np, const std::string& args, const TempDir& dir, const std::string& env = "") {
  const int raw = std::system(mpirun_command(np, args, dir, env).c_str());
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

// The process of `rank` among mpirun's children (Open MPI starts them on this host as its own), or -1.
pid_t rank_process(pid_t mpirun, int rank) {
  const std::string wanted = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat_file(entry.path() / "stat");
    std::string stat;
    std::getline(stat_file, stat);  // pid (comm) state ppid ...
    const std::size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(stat.substr(close + 1));
    std::string state;
    pid_t parent = 0;
    fields >> state >> parent;
    if (parent != mpirun) continue;
    std::ifstream environment(entry.path() / "environ");
    for (std::string var; std::getline(environment, var, '\0');)
      if (var == wanted) return static_cast<pid_t>(std::stol(name));
  }
  return -1;
}

// A two-rank `mpirun` job started without waiting (no time limit of timeout's: see mpirun_command), for the
// tests that signal one of its ranks: it trains into `dir`/run, and is returned once that run has written its
// first epoch's history. However the test leaves, the job ends: its ranks (SIGKILL, then SIGCONT for one that
// was stopped, in case the kernel holds the kill until it runs), then mpirun.
class MpirunJob {
 public:
  MpirunJob(const std::string& args, const TempDir& dir) {
    const std::string command = mpirun_command(2, args, dir, "", false);
    const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
    REQUIRE(posix_spawn(&mpirun_, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) == 0);
    for (int i = 0; i < 6000 && !std::filesystem::exists(dir / "run/history.csv"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ~MpirunJob() {
    if (reaped_) return;
    for (int r = 0; r < 2; ++r)
      if (const pid_t p = rank(r); p > 0) {
        kill(p, SIGKILL);
        kill(p, SIGCONT);
      }
    kill(mpirun_, SIGKILL);
    waitpid(mpirun_, nullptr, 0);
  }
  MpirunJob(const MpirunJob&) = delete;
  MpirunJob& operator=(const MpirunJob&) = delete;

  // The process of rank `r`, or -1.
  pid_t rank(int r) const { return rank_process(mpirun_, r); }
  // Waits at most 60 s for mpirun to end (then the job counts as hung): whether it did, and its wait status.
  bool wait(int& raw) {
    for (int i = 0; i < 6000 && !reaped_; ++i) {
      reaped_ = waitpid(mpirun_, &raw, WNOHANG) == mpirun_;
      if (!reaped_) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return reaped_;
  }

 private:
  pid_t mpirun_ = -1;  // mpirun's, the shell having exec'd it
  bool reaped_ = false;
};

// The digits MLP config with a strategy, 3 epochs.
std::string strategy_digits_config(const nlohmann::json& strategy, std::int64_t batch_size = 32) {
  nlohmann::json c = read_json(source_path("configs/digits_mlp.json"));
  c["model"] = source_path("configs/" + c["model"].get<std::string>()).string();
  c["strategy"] = strategy;
  c["epochs"] = 3;
  c["batch_size"] = batch_size;
  return c.dump(2);
}

std::vector<std::string> rank_history_rows(const std::filesystem::path& run) {
  std::vector<std::string> out;
  for (const auto& line : split_lines(read_text(run / "history.csv"))) out.push_back(line.substr(0, line.rfind(',')));
  return out;
}

const nlohmann::json kWorkers = {{"type", "multi-worker"}};

}  // namespace

TEST_CASE("mpirun -np 2 multi-worker trains the bits of 2 mirrored replicas; rank 0 alone writes and prints") {
  if (!mpirun_ready()) return;
  TempDir dir;
  dir.write("mirrored.json", strategy_digits_config({{"type", "mirrored"}, {"replicas", 2}}));
  dir.write("workers.json", strategy_digits_config(kWorkers));
  REQUIRE(run_tensorctl("train mirrored.json --output mirrored --quiet", dir.path()).status == 0);
  const CommandResult r = run_mpirun(2, "train workers.json --output workers", dir);
  REQUIRE(r.status == 0);
  CHECK(read_text(dir / "workers/weights.safetensors") == read_text(dir / "mirrored/weights.safetensors"));
  CHECK(rank_history_rows(dir / "workers") == rank_history_rows(dir / "mirrored"));
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

// The path NCCL takes on GPUs, on the simulated device: the workers agree through MPI that each can
// all-reduce on its device, and the gradients are then summed there (kernels/sim's AllReduce runs the CPU's).
TEST_CASE("mpirun -np 2 multi-worker on sim:0 all-reduces on the device, with the bits of the CPU's") {
  if (!mpirun_ready()) return;
  TempDir dir;
  dir.write("mirrored.json", strategy_digits_config({{"type", "mirrored"}, {"replicas", 2}}));
  nlohmann::json c = nlohmann::json::parse(strategy_digits_config(kWorkers));
  c["device"] = "sim:0";
  dir.write("workers.json", c.dump());
  REQUIRE(run_tensorctl("train mirrored.json --output mirrored --quiet", dir.path()).status == 0);
  const CommandResult r = run_mpirun(2, "train workers.json --output workers --log-device-placement", dir);
  REQUIRE(r.status == 0);
  CHECK(read_text(dir / "workers/weights.safetensors") == read_text(dir / "mirrored/weights.safetensors"));
  CHECK(r.err.find("placement: all_reduce/AllReduce (AllReduce): sim:0\n") != std::string::npos);
  CHECK(r.err.find("(AllReduce): cpu") == std::string::npos);
  CHECK(r.err.find("gradients all-reduced on the cpu") == std::string::npos);
}

TEST_CASE("streamed in windows: mpirun -np 2 multi-worker trains the bits of 2 mirrored replicas streamed") {
  if (!mpirun_ready()) return;
  TempDir dir;
  std::filesystem::copy_file(source_path("configs/data/digits.csv"), dir / "digits.csv");
  // Both ranks find no cache and build one in the run directory at once: each writes its own temporary and
  // renames it whole, so one cache is left and both train from it.
  for (const auto& [name, strategy] :
       {std::pair{"mirrored.json", nlohmann::json{{"type", "mirrored"}, {"replicas", 2}}},
        std::pair{"workers.json", kWorkers}}) {
    nlohmann::json c = nlohmann::json::parse(strategy_digits_config(strategy));
    c["data"] = {{"csv", "digits.csv"}, {"stream", true}, {"shuffle_buffer", 256}};
    dir.write(name, c.dump());
  }
  REQUIRE(run_tensorctl("train mirrored.json --output mirrored --quiet", dir.path()).status == 0);
  REQUIRE(run_mpirun(2, "train workers.json --output workers --quiet", dir).status == 0);
  CHECK(read_text(dir / "workers/weights.safetensors") == read_text(dir / "mirrored/weights.safetensors"));
  CHECK(read_json(dir / "workers/summary.json").at("input").at("windows") == 6);
  std::vector<std::string> caches;
  for (const auto& e : std::filesystem::directory_iterator(dir / "workers"))
    if (e.path().filename().string().find(".rows") != std::string::npos) caches.push_back(e.path().filename());
  CHECK(caches.size() == 1);
  CHECK(caches.at(0).ends_with(".rows"));
}

TEST_CASE(
    "a multi-worker run resumed by every rank from rank 0's checkpoint gives the bits of one that never stopped") {
  if (!mpirun_ready()) return;
  TempDir dir;
  dir.write("workers.json", strategy_digits_config(kWorkers));
  REQUIRE(run_mpirun(2, "train workers.json --output straight --quiet", dir).status == 0);
  REQUIRE(run_mpirun(2, "train workers.json --epochs 1 --output resumed --quiet", dir).status == 0);
  REQUIRE(run_mpirun(2, "train workers.json --resume resumed --quiet", dir).status == 0);
  CHECK(read_text(dir / "straight/weights.safetensors") == read_text(dir / "resumed/weights.safetensors"));
}

TEST_CASE(
    "SIGTERM to one rank stops every rank after the same step; rank 0 writes the checkpoint, and resuming gives "
    "the bits of a run that never stopped") {
  if (!mpirun_ready()) return;
  TempDir dir;
  dir.write("workers.json", strategy_digits_config(kWorkers));
  // Long enough (about 7 s) that the signal, sent after the first epoch's checkpoint, lands while training runs.
  const std::string run = " --epochs 200 --quiet";
  REQUIRE(run_mpirun(2, "train workers.json --output straight" + run, dir).status == 0);
  MpirunJob job("train workers.json --output run" + run, dir);
  // Rank 1 alone, as a batch system or a user's `kill` may signal one process: had it stopped on its own,
  // rank 0 would wait for it in the next all-reduce (until the stall timeout, then exit 1).
  const pid_t rank1 = job.rank(1);
  REQUIRE(rank1 > 0);
  kill(rank1, SIGTERM);
  int raw = 0;
  const bool ended = job.wait(raw);
  const std::string out = read_text(dir / "mpi.out");
  INFO(out << read_text(dir / "mpi.err"));
  REQUIRE(ended);
  CHECK(WIFEXITED(raw));
  CHECK(WEXITSTATUS(raw) != 0);  // a rank ended by a signal's status
  REQUIRE(out.find("Interrupted: epoch ") != std::string::npos);
  CHECK(out.find("Resume with: tensorctl train workers.json --resume run --epochs 200 --quiet") != std::string::npos);
  REQUIRE(!std::filesystem::exists(dir / "run/weights.safetensors"));
  REQUIRE(run_mpirun(2, "train workers.json --resume run" + run, dir).status == 0);
  CHECK(read_text(dir / "straight/weights.safetensors") == read_text(dir / "run/weights.safetensors"));
  CHECK(rank_history_rows(dir / "straight") == rank_history_rows(dir / "run"));
}

TEST_CASE("a worker that stalls is named by the others' timeout, one line, and the job ends") {
  if (!mpirun_ready()) return;
  TempDir dir;
  dir.write("workers.json", strategy_digits_config({{"type", "multi-worker"}, {"timeout_seconds", 1}}));
  // Rank 1 stops for good before its fifth all-reduce: the first two broadcast rank 0's weights (when the
  // model is made, and when training starts), then each step has its gradients' and its results'; the
  // fifth is step 1's gradients.
  const CommandResult r = run_mpirun(2, "train workers.json --output run --quiet", dir, "TCTL_MPI_STALL=1:5");
  CHECK(r.status != 0);
  CHECK(r.err.find("error: all-reduce of all_reduce/AllReduce at step 1: rank 1 of 2 did not arrive within 1 s\n") !=
        std::string::npos);
}

TEST_CASE(
    "a worker stopped by SIGSTOP is named by the other's timeout in one line, exit 1, and rank 0's last "
    "checkpoint resumes to the bits of a run that never stopped") {
  if (!mpirun_ready()) return;
  TempDir dir;
  dir.write("workers.json", strategy_digits_config({{"type", "multi-worker"}, {"timeout_seconds", 1}}));
  MpirunJob job("train workers.json --output run --epochs 200 --quiet", dir);
  // A real stopped process, as a debugger, a swapped-out node or a `kill -STOP` leaves one: it holds its
  // sockets and shared memory open, so MPI sees no failure; wherever rank 0 waits for it (its arrival
  // notice or the sum), only rank 0's timeout ends the job.
  const pid_t rank1 = job.rank(1);
  REQUIRE(rank1 > 0);
  REQUIRE(kill(rank1, SIGSTOP) == 0);
  // The timeout (1 s for the notices, 1 s more for the sum) and mpirun's teardown (SIGCONT, SIGTERM and
  // SIGKILL a second apart) take a few seconds; 60 s on a loaded machine, then the job counts as hung (and
  // the job's destructor ends it). Continued by that SIGCONT, rank 1 waits 5 s more before it blames rank 0: the one
  // error line is rank 0's.
  int raw = 0;
  const bool ended = job.wait(raw);
  const std::string err = read_text(dir / "mpi.err");
  INFO(read_text(dir / "mpi.out") << err);
  REQUIRE(ended);
  CHECK(WIFEXITED(raw));
  CHECK(WEXITSTATUS(raw) == 1);  // rank 0's status, which mpirun passes on
  std::vector<std::string> errors;
  for (const auto& line : split_lines(err))
    if (line.rfind("error: ", 0) == 0) errors.push_back(line);
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].find("rank 1 of 2") != std::string::npos);
  CHECK(errors[0].find(" at step ") != std::string::npos);
  // Rank 0's last checkpoint is its last epoch's (the failed step's weights are not written: with buckets
  // some gradients may have been applied and others not); history.csv, written with it, counts its epochs.
  REQUIRE(std::filesystem::exists(dir / "run/checkpoint.safetensors"));
  REQUIRE(!std::filesystem::exists(dir / "run/weights.safetensors"));
  const std::size_t saved = rank_history_rows(dir / "run").size() - 1;  // less the header
  REQUIRE(saved >= 1);
  const std::string more = " --epochs " + std::to_string(saved + 1) + " --quiet";
  REQUIRE(run_mpirun(2, "train workers.json --resume run" + more, dir).status == 0);
  REQUIRE(run_mpirun(2, "train workers.json --output straight" + more, dir).status == 0);
  CHECK(read_text(dir / "straight/weights.safetensors") == read_text(dir / "run/weights.safetensors"));
  CHECK(rank_history_rows(dir / "straight") == rank_history_rows(dir / "run"));
}

TEST_CASE(
    "multi-worker mistakes exit 2 naming the key: no mpirun, workers that do not divide the batch, configs "
    "that differ between ranks") {
  TempDir dir;
  dir.write("workers.json", strategy_digits_config(kWorkers));
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
