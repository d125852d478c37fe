#include "core/mpi_world.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <limits>
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

// Point-to-point tags of the exchanges: an all-reduce's arrival notices, all_gather's values, and the
// notices of leaving (mpi_finalize).
constexpr int kArrivalTag = 4242;
constexpr int kGatherTag = 4243;
constexpr int kLeavingTag = 4244;

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

// Set by SIGCONT: this process was stopped (kill -STOP, a terminal's job control) and then continued. Only
// the handler writes it, storing to a lock-free atomic, which is async-signal-safe.
std::atomic<bool> g_continued{false};
static_assert(std::atomic<bool>::is_always_lock_free);
extern "C" void on_continue(int) { g_continued.store(true, std::memory_order_relaxed); }

// How long a wait lasts, at least, after this process was stopped: mpirun ends a job by sending its ranks
// SIGCONT, SIGTERM a second later and SIGKILL a second after that (Open MPI's odls_base_sigkill_timeout).
// A rank that was stopped, and is continued so, must not time out first and blame the rank that waited for
// it: the job's stderr would hold a second error line, naming the wrong rank.
constexpr auto kAfterStop = std::chrono::seconds(5);

// Polls until `done` says so or `timeout` has passed since `from`. Open MPI moves a non-blocking request
// on only inside MPI calls (it has no progress thread), so the poll is tight for its first kSpin, reading
// the clock every 64 polls, then yields the core between tests, as Open MPI's own blocking waits do when
// oversubscribed. Yielding from the first poll hands any other runnable process (a compiler) the rest of
// a time slice, many times a small all-reduce's own time (`mpirun --oversubscribe -np 2 bench_data_parallel
// --allreduce 70504` beside a build; figures in bench/README.md, "Figures behind the constants in the code").
//
// Time this process did not run does not count. Once a wait notices a SIGCONT, or a gap of more than half
// the timeout between two clock reads (a debugger's stop sends no SIGCONT), no wait ends before the timeout,
// and kAfterStop, have passed from then: the process cannot tell how long the others took. Returns whether
// `done` became true.
constexpr auto kSpin = std::chrono::milliseconds(1);

// When a wait last noticed that this process had been stopped (steady_clock's count; none yet: the lowest).
std::atomic<std::chrono::steady_clock::rep> g_stop_noticed{std::numeric_limits<std::chrono::steady_clock::rep>::min()};

template <class Done>
bool poll_until(std::chrono::steady_clock::time_point from, MpiWorld::Seconds timeout, Done done) {
  using Clock = std::chrono::steady_clock;
  const auto span = std::chrono::duration_cast<Clock::duration>(timeout);
  const auto after_stop = std::max<Clock::duration>(span, kAfterStop);
  auto last = from;  // a stop between `from` and the first poll counts too
  // Every wait until kAfterStop after the stop, not only the one that noticed it: after mpirun's SIGCONT,
  // the sum that follows the arrival notices waits for a rank that has exited.
  const auto since_stop = [&] { return Clock::time_point(Clock::duration(g_stop_noticed.load())) + after_stop; };
  auto deadline = std::max(from + span, since_stop());
  const auto spin_until = Clock::now() + kSpin;
  bool spinning = true;
  for (std::uint64_t polls = 0;; ++polls) {
    if (done()) return true;
    if (!spinning || polls % 64 == 63) {
      const auto now = Clock::now();
      if (g_continued.exchange(false, std::memory_order_relaxed) || now - last > span / 2) {
        g_stop_noticed.store(now.time_since_epoch().count());
        deadline = std::max(deadline, since_stop());
      }
      last = now;
      if (now >= deadline) return false;
      spinning = now < spin_until;
    }
    if (!spinning) std::this_thread::yield();
  }
}

// Every rank's `value`, in rank order, sent by each rank to every other point to point under `tag` (one
// exchange at a time per tag: MPI keeps one sender's messages of one tag in order). Unlike MPI_Allgather
// it waits `timeout` from `from` (poll_until) and knows who is missing: throws RuntimeError "<what>: rank 1 of 2 did
// not arrive within 60 s". The requests of a wait that timed out are left pending: the process is failing, and with no
// further MPI call they are never moved on, so nothing writes into the freed buffers.
std::vector<std::uint64_t> exchange(int rank, int size, int tag, std::uint64_t value,
                                    std::chrono::steady_clock::time_point from, MpiWorld::Seconds timeout,
                                    std::string_view what) {
  std::vector<std::uint64_t> all(static_cast<std::size_t>(size));
  all[static_cast<std::size_t>(rank)] = value;
  std::vector<MPI_Request> sends, receives;
  std::vector<int> peers;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    sends.emplace_back(MPI_REQUEST_NULL);
    receives.emplace_back(MPI_REQUEST_NULL);
    MPI_Isend(&all[static_cast<std::size_t>(rank)], 1, MPI_UINT64_T, r, tag, MPI_COMM_WORLD, &sends.back());
    MPI_Irecv(&all[static_cast<std::size_t>(r)], 1, MPI_UINT64_T, r, tag, MPI_COMM_WORLD, &receives.back());
    peers.push_back(r);
  }
  const bool all_here = poll_until(from, timeout, [&] {
    int flag = 0;
    MPI_Testall(static_cast<int>(receives.size()), receives.data(), &flag, MPI_STATUSES_IGNORE);
    return flag != 0;
  });
  if (!all_here) {
    std::string missing;
    int count = 0;
    for (std::size_t k = 0; k < peers.size(); ++k) {
      int flag = 0;
      MPI_Test(&receives[k], &flag, MPI_STATUS_IGNORE);
      if (flag) continue;
      missing += (count++ == 0 ? "" : ", ") + std::to_string(peers[k]);
    }
    throw RuntimeError(std::string(what) + ": " + (count == 1 ? "rank " : "ranks ") + missing + " of " +
                       std::to_string(size) + " did not arrive within " + seconds_text(timeout.count()) + " s");
  }
  MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE);
  return all;
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
    // Open MPI's non-blocking all-reduce (libnbc) takes a binomial tree for 2 ranks, slower than its
    // blocking one; its ring is as fast (bench_data_parallel --allreduce, figures in bench/README.md). Read
    // by MPI_Init; a value the user set stays, and other MPIs ignore the variable.
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
      throw RuntimeError("MPI_Init_thread failed");
    if (provided < MPI_THREAD_SERIALIZED)
      throw RuntimeError(
          "this MPI offers no thread support beyond MPI_THREAD_FUNNELED; multi-worker training "
          "calls it from its executor's threads");
    g_initialized = true;
  }
  struct sigaction continued {};
  continued.sa_handler = on_continue;
  continued.sa_flags = SA_RESTART;
  sigemptyset(&continued.sa_mask);
  sigaction(SIGCONT, &continued, nullptr);
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
  // the timeout, until all have; a rank that has not by then is named. Then the sum, by MPI_Iallreduce
  // polled against the timeout again, from now: a rank stopped inside the sum (SIGSTOP, a debugger, a
  // swapped-out node) keeps its connections open, so MPI sees no failure, and the blocking MPI_Allreduce
  // used before waited for it for good. With the ring (see get()) and polled as above, it is as fast as
  // MPI_Allreduce.
  const std::string where = "all-reduce of " + std::string(what);
  const std::vector<std::uint64_t> keys = exchange(rank_, size_, kArrivalTag, key, arrived, timeout_, where);
  for (int r = 0; r < size_; ++r)
    if (keys[static_cast<std::size_t>(r)] != key)
      throw RuntimeError(where + ": rank " + std::to_string(r) +
                         " reached another all-reduce (the ranks' steps went apart)");
  if (n > 0) {
    MPI_Request sum = MPI_REQUEST_NULL;
    MPI_Iallreduce(MPI_IN_PLACE, out, static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &sum);
    const bool done = poll_until(std::chrono::steady_clock::now(), timeout_, [&] {
      int flag = 0;
      MPI_Test(&sum, &flag, MPI_STATUS_IGNORE);
      return flag != 0;
    });
    // MPI does not say which rank holds a collective back; with two it can only be the other one. The
    // abandoned request is never moved on again (see exchange), so it writes nothing into `out`.
    if (!done)
      throw RuntimeError(where + ": " +
                         (size_ == 2 ? "rank " + std::to_string(1 - rank_) + " of 2 arrived but did not finish the sum"
                                     : "every rank of " + std::to_string(size_) +
                                           " arrived but the sum did not finish (MPI does not say which rank "
                                           "stopped)") +
                         " within " + seconds_text(timeout_.count()) + " s");
  }
  record(member, n, std::chrono::duration<double>(std::chrono::steady_clock::now() - arrived).count());
}

void MpiWorld::abort(const std::string&) {}

std::vector<std::uint64_t> MpiWorld::all_gather(std::uint64_t value, std::string_view what) {
  return exchange(rank_, size_, kGatherTag, value, std::chrono::steady_clock::now(), timeout_, what);
}

void mpi_finalize() {
  std::lock_guard lock(g_mu);
  if (!g_initialized) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // MPI_Finalize waits for every rank, without a timeout: a rank stopped after the last all-reduce would
  // hold this one there for good. Leaving notices first, against the timeout; a rank that fails that wait
  // does not finalize (main exits 1, and mpirun ends the job).
  if (g_world)
    exchange(g_world->rank(), g_world->members(), kLeavingTag, 0, std::chrono::steady_clock::now(), g_world->timeout(),
             "leaving the job");
  MPI_Finalize();
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
std::vector<std::uint64_t> MpiWorld::all_gather(std::uint64_t value, std::string_view) { return {value}; }
void mpi_finalize() {}

#endif

}  // namespace tctl
