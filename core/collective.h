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

#include "core/errors.h"

namespace tctl {

class CollectiveGroup {
 public:
  using Seconds = std::chrono::duration<double>;
  static constexpr Seconds kDefaultTimeout{60.0};

  // A new group of `members` >= 1 with a process-unique id (never reused), entered in the registry. The
  // group lives as long as someone holds it; the registry holds it weakly, so dropping the last handle
  // removes it (a kernel looking it up afterwards finds nothing). `timeout` > 0 bounds each member's wait.
  static std::shared_ptr<CollectiveGroup> create(int members, Seconds timeout = kDefaultTimeout);
  // The live group with this id, or null when there is none (never created, or dropped).
  static std::shared_ptr<CollectiveGroup> find(std::int64_t id);
  // Groups alive now; for tests.
  static std::size_t registered();

  ~CollectiveGroup();
  CollectiveGroup(const CollectiveGroup&) = delete;
  CollectiveGroup& operator=(const CollectiveGroup&) = delete;

  std::int64_t id() const { return id_; }
  int members() const { return members_; }
  Seconds timeout() const { return timeout_; }

  // Member `member` (0 <= member < members()) contributes in[0, n) with `weight` to the all-reduce `key`,
  // blocks until every member has, then writes out[i] = sum over m = 0..members()-1, in that order, of
  // float(weight_m * in_m[i]): the first product, then each next one added, each step rounded to float.
  // Every member must pass the same n. `in` is read, by whichever member arrives last, only while this
  // call has not returned; `out` may equal `in`. `what` names the value in errors
  // ("dense/kernel/grad at step 12"). Throws RuntimeError, writing nothing to out, when the wait times out
  // ("all-reduce of <what>: replica 1 of 2 did not arrive within 60 s"), when the group is or becomes
  // aborted first, when n differs between members, or when a member arrives twice for one key.
  void all_reduce(int member, std::uint64_t key, const float* in, std::int64_t n, float weight, float* out,
                  std::string_view what);

  // Fails every all-reduce waiting now and every later one with `reason` (a replica's run failed, so the
  // others need not wait for their timeout). Waits already complete finish normally. The first reason stays.
  void abort(const std::string& reason);
  bool aborted() const;
  // Keys some member has arrived for and others have not yet; for tests.
  std::size_t in_flight() const;

 private:
  struct Exchange;
  CollectiveGroup(std::int64_t id, int members, Seconds timeout);
  void abort_locked(const std::string& reason);
  std::shared_ptr<Exchange> arrive(int member, std::uint64_t key, const float* in, std::int64_t n, float weight,
                                   std::string_view what);
  void wait_for_sum(std::unique_lock<std::mutex>& lock, Exchange& e, std::string_view what);
  std::string missing_members(const Exchange& e) const;

  const std::int64_t id_;
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

}  // namespace tctl
