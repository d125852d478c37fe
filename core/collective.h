// CollectiveGroup: the replicas of one process (threads, each running its own graph) that meet in
// all-reduces, and the process-wide registry the AllReduce kernel finds a group in by its id. The in-process
// counterpart of an MPI communicator; data-parallel training (issue 17) combines gradients through it.
//
// An all-reduce is identified by a key that every member passes for the same collective (collective_key:
// the step and the op's instance). Many keys may be in flight at once; a member may arrive for the next
// step while another is still copying out this step's result. The sum is taken once, in member order, so
// every member gets the same bits, the bits one replica computes for the same products in that order.
//
// A stall does not hang: a member that waits longer than the group's timeout for the others aborts the
// group, and every member waiting then, or calling later, throws RuntimeError. An aborted group stays
// aborted: the run it served has failed, and a new run makes a new group.
//
// Thread-safe: every method may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/errors.h"

namespace tctl {

// What an all-reduce needs from whoever carries it: the in-process group below, or the processes of an MPI
// job (multi-worker training). Each lives in a process-wide registry under an id that is never reused, so
// a graph's AllReduce node names its collective by a number; the registry holds them weakly, so dropping
// the last handle removes one (a kernel looking it up afterwards finds nothing).
class Collective {
 public:
  virtual ~Collective();
  Collective(const Collective&) = delete;
  Collective& operator=(const Collective&) = delete;

  // The live collective with this id, or null when there is none (never created, or dropped).
  static std::shared_ptr<Collective> find(std::int64_t id);
  // Collectives alive now; for tests.
  static std::size_t registered();

  std::int64_t id() const { return id_; }
  virtual int members() const = 0;
  // Whether each member is a process of its own (an MPI job's ranks), so the members may meet while each
  // sets up (join_collective_on below). False for replicas that are threads of one process, which a caller
  // traces one after another.
  virtual bool members_are_processes() const { return false; }
  // Member `member` contributes in[0, n) with `weight` to the all-reduce `key`; returns once out[0, n) holds
  // the sum over members of weight_m * in_m (see each implementation for the order and the errors).
  // Every member must pass the same n; `out` may equal `in`.
  virtual void all_reduce(int member, std::uint64_t key, const float* in, std::int64_t n, float weight, float* out,
                          std::string_view what) = 0;
  // Fails every all-reduce waiting now and every later one with `reason` (a replica's run failed, so the
  // others need not wait for their timeout).
  virtual void abort(const std::string& reason) = 0;
  // How long a member waits for the others before its all-reduce fails; a device that all-reduces on its own
  // (NCCL on a GPU) bounds its waits by it too.
  using Seconds = std::chrono::duration<double>;
  virtual Seconds timeout() const = 0;

  // What member `member` has spent in all-reduces so far: calls, the elements it brought, and the seconds
  // from its arrival to its result (waiting for the others included).
  struct Stats {
    std::int64_t calls = 0;
    std::int64_t elements = 0;
    double seconds = 0.0;
  };
  Stats stats(int member) const;
  // Counted by a device whose kernels all-reduce on their own (NCCL's): a call of `elements` queued there,
  // whose wait the host does not see (its seconds stay 0).
  void record_device_call(int member, std::int64_t elements) { record(member, elements, 0.0); }

 protected:
  // Takes the next id; make() enters the object in the registry under it.
  explicit Collective(int members);
  template <class T>
  static std::shared_ptr<T> make(T* made) {
    std::shared_ptr<T> owned(made);
    enter(owned);
    return owned;
  }
  // Counted by the implementations' all_reduce.
  void record(int member, std::int64_t elements, double seconds);

 private:
  static void enter(const std::shared_ptr<Collective>& c);
  const std::int64_t id_;
  mutable std::mutex stats_mu_;
  std::vector<Stats> stats_ TCTL_GUARDED_BY(stats_mu_);
};

class CollectiveGroup final : public Collective {
 public:
  static constexpr Seconds kDefaultTimeout{60.0};

  // A new group of `members` >= 1, entered in the registry (see Collective). `timeout` > 0 bounds each
  // member's wait.
  static std::shared_ptr<CollectiveGroup> create(int members, Seconds timeout = kDefaultTimeout);

  int members() const override { return members_; }
  Seconds timeout() const override { return timeout_; }

  // Member `member` (0 <= member < members()) contributes in[0, n) with `weight` to the all-reduce `key`,
  // blocks until every member has, sums its slice of the elements (the members share the work), and once
  // every slice is done writes out[i] = sum over m = 0..members()-1, in that order, of float(weight_m *
  // in_m[i]): the first product, then each next one added, each step rounded to float. Every member must
  // pass the same n. `in` is read, by every member, only while this call has not returned; `out` may
  // equal `in`. `what` names the value in errors
  // ("dense/kernel/grad at step 12"). Throws RuntimeError, writing nothing to out, when the wait times out
  // ("all-reduce of <what>: replica 1 of 2 did not arrive within 60 s"), when the group is or becomes
  // aborted first, when n differs between members, or when a member arrives twice for one key.
  void all_reduce(int member, std::uint64_t key, const float* in, std::int64_t n, float weight, float* out,
                  std::string_view what) override;

  // Fails every all-reduce waiting now and every later one with `reason` (a replica's run failed, so the
  // others need not wait for their timeout). Waits already complete finish normally. The first reason stays.
  void abort(const std::string& reason) override;
  bool aborted() const;
  // Starts the group over after an abort, once no member is inside all_reduce (the owner joined them all):
  // the run survived the failed step and goes on. Exchanges some members had arrived for are forgotten.
  void recover();
  // Keys some member has arrived for and others have not yet; for tests.
  std::size_t in_flight() const;

 private:
  struct Exchange;
  CollectiveGroup(int members, Seconds timeout);
  void abort_locked(const std::string& reason);
  std::shared_ptr<Exchange> arrive(int member, std::uint64_t key, const float* in, std::int64_t n, float weight,
                                   std::string_view what);
  // Until every member has arrived; throws on timeout or abort before that.
  void wait_for_all(std::unique_lock<std::mutex>& lock, Exchange& e, std::string_view what);
  std::string missing_members(const Exchange& e) const;

  const int members_;
  const Seconds timeout_;
  mutable std::mutex mu_;
  // Woken when an exchange's sum is ready and when the group aborts; members are few, so one suffices.
  std::condition_variable cv_;
  // By key, the exchanges some member has arrived for; one leaves once every member has arrived.
  std::map<std::uint64_t, std::shared_ptr<Exchange>> pending_ TCTL_GUARDED_BY(mu_);
  std::string abort_reason_ TCTL_GUARDED_BY(mu_);  // empty while the group works
};

// The key of the all-reduce `instance` (0 <= instance < 2^20) at `step` (0 <= step < 2^43): distinct for
// distinct pairs, so one step's collectives never meet the next step's.
std::uint64_t collective_key(std::int64_t step, std::int64_t instance);
inline constexpr std::int64_t kMaxCollectiveInstances = std::int64_t{1} << 20;
// The instance of the all-reduces with which members agree on a device's own collective (join_collective_on);
// the training step's own reserved instances lie just below it (models/train/split_step.h).
inline constexpr std::int64_t kJoinInstance = kMaxCollectiveInstances - 4;

// Where member `member` of `collective` all-reduces the gradients a replica on device `device` computes:
// `device` itself once its own all-reduce kernel carries the collective (NCCL on CUDA, and the simulated
// device, whose kernel runs the CPU's), else "cpu", with the reason in *why (none for the CPU's own name, nor
// for a device absent here, which placement warns of). Every member must call it at the same point with the same device
// name: when the members are processes, they first agree through the collective that every one of them can, so all take
// the device's path or none does; replicas in one process decide each for itself.
std::string join_collective_on(const std::string& device, const std::shared_ptr<Collective>& collective, int member,
                               std::string* why);

}  // namespace tctl
