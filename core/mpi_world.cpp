#include "core/mpi_world.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#if TENSORCTL_WITH_MPI
#include <mpi.h>
#endif

namespace tctl {

namespace {

std::optional<int> env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 0 || n > 1 << 20) return std::nullopt;
  return static_cast<int>(n);
}

std::string seconds_text(double s) {
  std::string t = std::to_string(s);
  while (!t.empty() && t.back() == '0') t.pop_back();
  if (!t.empty() && t.back() == '.') t.pop_back();
  return t;
}

}  // namespace

std::optional<MpiLaunch> mpi_launch() {
  for (const auto& [rank, size] :
       {std::pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, std::pair{"PMI_RANK", "PMI_SIZE"}}) {
    const auto r = env_int(rank);
    const auto s = env_int(size);
    if (r && s && *s >= 1 && *r < *s) return MpiLaunch{*r, *s};
  }
  return std::nullopt;
}

#if TENSORCTL_WITH_MPI

namespace {

std::mutex g_mu;
std::shared_ptr<MpiWorld> g_world;  // guarded by g_mu
bool g_initialized = false;         // guarded by g_mu

constexpr int kArrivalTag = 4242;

// TCTL_MPI_STALL="RANK:CALL" makes rank RANK stop before its CALL-th all-reduce (1-based) for good, as a
// hung worker would: the tests' way to see the others time out naming it.
std::optional<std::pair<int, std::int64_t>> stall_from_environment() {
  const char* v = std::getenv("TCTL_MPI_STALL");
  if (v == nullptr) return std::nullopt;
  int rank = -1;
  long long call = 0;
  if (std::sscanf(v, "%d:%lld", &rank, &call) != 2 || rank < 0 || call < 1) return std::nullopt;
  return std::pair{rank, static_cast<std::int64_t>(call)};
}

// Polls until `done` says so or the deadline passes. Open MPI moves a non-blocking collective on only
// inside MPI calls (it has no progress thread), so the poll is tight, yielding the core between tests as
// its own blocking waits do when oversubscribed; the clock is read every 64 polls. Returns whether `done`
// became true.
template <class Done>
bool poll_until(std::chrono::steady_clock::time_point deadline, Done done) {
  for (std::uint64_t polls = 0;; ++polls) {
    if (done()) return true;
    if (polls % 64 == 63 && std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::yield();
  }
}

}  // namespace

bool mpi_built() { return true; }

std::shared_ptr<MpiWorld> MpiWorld::get(Seconds timeout) {
  std::lock_guard lock(g_mu);
  if (g_world) return g_world;
  if (!mpi_launch()) throw RuntimeError("multi-worker training needs its processes started by mpirun");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
      throw RuntimeError("MPI_Init_thread failed");
    if (provided < MPI_THREAD_SERIALIZED)
      throw RuntimeError(
          "this MPI offers no thread support beyond MPI_THREAD_FUNNELED; multi-worker training "
          "calls it from its executor's threads");
    g_initialized = true;
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  g_world = make(new MpiWorld(rank, size, timeout));
  return g_world;
}

MpiWorld::MpiWorld(int rank, int size, Seconds timeout)
    : Collective(size), rank_(rank), size_(size), timeout_(timeout) {}

void MpiWorld::all_reduce(int member, std::uint64_t key, const float* in, std::int64_t n, float weight, float* out,
                          std::string_view what) {
  TCTL_CHECK(member == rank_, "an MPI all-reduce for another rank");
  TCTL_CHECK(n >= 0 && n <= INT32_MAX, "an MPI all-reduce of more than 2^31 elements");
  static const auto stall = stall_from_environment();
  if (stall && stall->first == rank_ && ++calls_ == stall->second)
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  const auto arrived = std::chrono::steady_clock::now();
  for (std::int64_t i = 0; i < n; ++i) out[i] = weight * in[i];

  // Arrival notices first: every rank tells every other which all-reduce it has reached, and waits, against
  // the timeout, until all have; a rank that has not by then is named. Only then the sum, by the blocking
  // MPI_Allreduce, whose tuned algorithms Open MPI's non-blocking one lacks (2.6 times slower for the MLP's
  // 2.7 MB): every rank is inside it, so it ends unless a process dies, and then mpirun ends the job.
  const std::uint64_t mine = key;
  std::vector<std::uint64_t> theirs(static_cast<std::size_t>(size_));
  std::vector<MPI_Request> sends, receives;
  std::vector<int> from;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    sends.emplace_back(MPI_REQUEST_NULL);
    receives.emplace_back(MPI_REQUEST_NULL);
    MPI_Isend(&mine, 1, MPI_UINT64_T, r, kArrivalTag, MPI_COMM_WORLD, &sends.back());
    MPI_Irecv(&theirs[static_cast<std::size_t>(r)], 1, MPI_UINT64_T, r, kArrivalTag, MPI_COMM_WORLD, &receives.back());
    from.push_back(r);
  }
  const auto deadline = arrived + std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout_);
  const bool all_here = poll_until(deadline, [&] {
    int flag = 0;
    MPI_Testall(static_cast<int>(receives.size()), receives.data(), &flag, MPI_STATUSES_IGNORE);
    return flag != 0;
  });
  if (!all_here) {
    std::string missing;
    int count = 0;
    for (std::size_t k = 0; k < from.size(); ++k) {
      int flag = 0;
      MPI_Test(&receives[k], &flag, MPI_STATUS_IGNORE);
      if (flag) continue;
      missing += (count++ == 0 ? "" : ", ") + std::to_string(from[k]);
    }
    throw RuntimeError("all-reduce of " + std::string(what) + ": " + (count == 1 ? "rank " : "ranks ") + missing +
                       " of " + std::to_string(size_) + " did not arrive within " + seconds_text(timeout_.count()) +
                       " s");
  }
  MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE);
  for (int r : from)
    if (theirs[static_cast<std::size_t>(r)] != mine)
      throw RuntimeError("all-reduce of " + std::string(what) + ": rank " + std::to_string(r) +
                         " reached another all-reduce (the ranks' steps went apart)");
  if (n > 0) MPI_Allreduce(MPI_IN_PLACE, out, static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  record(member, n, std::chrono::duration<double>(std::chrono::steady_clock::now() - arrived).count());
}

void MpiWorld::abort(const std::string&) {}

std::vector<std::uint64_t> MpiWorld::all_gather(std::uint64_t value) {
  std::vector<std::uint64_t> all(static_cast<std::size_t>(size_));
  MPI_Allgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  return all;
}

void mpi_finalize() {
  std::lock_guard lock(g_mu);
  if (!g_initialized) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

#else  // no MPI in this build

bool mpi_built() { return false; }

std::shared_ptr<MpiWorld> MpiWorld::get(Seconds) {
  throw RuntimeError("this tensorctl was built without MPI (install libopenmpi-dev and rebuild)");
}

MpiWorld::MpiWorld(int rank, int size, Seconds timeout)
    : Collective(size), rank_(rank), size_(size), timeout_(timeout) {}
void MpiWorld::all_reduce(int, std::uint64_t, const float*, std::int64_t, float, float*, std::string_view) {
  throw RuntimeError("this tensorctl was built without MPI");
}
void MpiWorld::abort(const std::string&) {}
std::vector<std::uint64_t> MpiWorld::all_gather(std::uint64_t value) { return {value}; }
void mpi_finalize() {}

#endif

}  // namespace tctl
