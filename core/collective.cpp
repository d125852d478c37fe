#include "core/collective.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <vector>

#include "core/device.h"

namespace tctl {

// One all-reduce in flight: what each member brought, and the sum once the last has arrived. Members hold
// it by shared_ptr, so it outlives its entry in pending_ until the slowest member has copied the sum out,
// whatever the others have started meanwhile.
struct CollectiveGroup::Exchange {
  Exchange(int members, std::int64_t n)
      : inputs(static_cast<std::size_t>(members)),
        weights(static_cast<std::size_t>(members)),
        present(static_cast<std::size_t>(members)),
        n(n) {}
  std::vector<const float*> inputs;
  std::vector<float> weights;
  std::vector<char> present;
  const std::int64_t n;
  int count = 0;
  int slices = 0;  // members whose slice of the sum is written
  bool done = false;
  bool timed_out = false;  // a member of this exchange ran out of time and aborted the group
  // Sized by the last member to arrive; each member writes its slice outside the lock before counting it
  // under the lock; read only after `done`.
  std::vector<float> sum;
};

namespace {

// The collectives alive, held weakly: one leaves in its destructor. Built on first use, so creating one
// from a static initializer still finds it, and never destroyed, so a collective a static holds (the MPI
// world) may leave it at exit whatever the order statics go in.
struct Registry {
  std::mutex mu;
  std::map<std::int64_t, std::weak_ptr<Collective>> live;
  std::int64_t next_id = 1;
};
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

std::int64_t next_id() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  return r.next_id++;
}

// "60", "0.2": the shortest text that reads back as the same double.
std::string format_seconds(CollectiveGroup::Seconds s) {
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof buf, s.count()).ptr;
  return std::string(buf, end);
}

std::string prefix(std::string_view what) { return "all-reduce of " + std::string(what) + ": "; }

// Products first, then added in member order: each element sees the same float operations, in the same
// order, as a single replica summing the same products, so the bits match it and each other.
// Elements [begin, end).
void weighted_sum(const std::vector<const float*>& inputs, const std::vector<float>& weights, std::int64_t begin,
                  std::int64_t end, float* out) {
  const float w0 = weights[0];
  const float* x0 = inputs[0];
  for (std::int64_t i = begin; i < end; ++i) out[i] = w0 * x0[i];
  for (std::size_t m = 1; m < inputs.size(); ++m) {
    const float w = weights[m];
    const float* x = inputs[m];
    for (std::int64_t i = begin; i < end; ++i) out[i] += w * x[i];
  }
}

}  // namespace

Collective::Collective(int members) : id_(next_id()), stats_(static_cast<std::size_t>(members)) {}

// Between the last handle going and this erase, find() sees an expired entry and returns null; ids are
// never reused, so the erase cannot remove a newer collective.
Collective::~Collective() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.live.erase(id_);
}

void Collective::enter(const std::shared_ptr<Collective>& c) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.live.emplace(c->id(), c);
}

std::shared_ptr<Collective> Collective::find(std::int64_t id) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  auto it = r.live.find(id);
  return it == r.live.end() ? nullptr : it->second.lock();
}

std::size_t Collective::registered() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  return r.live.size();
}

Collective::Stats Collective::stats(int member) const {
  std::lock_guard lock(stats_mu_);
  return stats_.at(static_cast<std::size_t>(member));
}

void Collective::record(int member, std::int64_t elements, double seconds) {
  std::lock_guard lock(stats_mu_);
  Stats& s = stats_.at(static_cast<std::size_t>(member));
  ++s.calls;
  s.elements += elements;
  s.seconds += seconds;
}

std::shared_ptr<CollectiveGroup> CollectiveGroup::create(int members, Seconds timeout) {
  TCTL_CHECK(members >= 1, "a collective group needs at least one member");
  TCTL_CHECK(timeout.count() > 0, "a collective group needs a positive timeout");
  return make(new CollectiveGroup(members, timeout));
}

CollectiveGroup::CollectiveGroup(int members, Seconds timeout)
    : Collective(members), members_(members), timeout_(timeout) {}

void CollectiveGroup::all_reduce(int member, std::uint64_t key, const float* in, std::int64_t n, float weight,
                                 float* out, std::string_view what) {
  TCTL_CHECK(member >= 0 && member < members_, "all-reduce member out of range");
  TCTL_CHECK(n >= 0 && (n == 0 || (in != nullptr && out != nullptr)), "all-reduce without buffers");
  const auto arrived = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  const std::shared_ptr<Exchange> e = arrive(member, key, in, n, weight, what);
  if (e->count == members_) {
    e->sum.resize(static_cast<std::size_t>(n));
    cv_.notify_all();
  } else {
    wait_for_all(lock, *e, what);
  }
  // Every member sums its own slice of the elements without the lock (other keys go on meanwhile), so the
  // members share the work; none leaves before every slice is done, which keeps every input read alive.
  lock.unlock();
  const std::int64_t begin = n * member / members_;
  const std::int64_t end = n * (member + 1) / members_;
  if (end > begin) weighted_sum(e->inputs, e->weights, begin, end, e->sum.data());
  lock.lock();
  if (++e->slices == members_) {
    e->done = true;
    cv_.notify_all();
  } else {
    cv_.wait(lock, [&] { return e->done; });
  }
  lock.unlock();
  std::copy(e->sum.begin(), e->sum.end(), out);
  record(member, n, std::chrono::duration<double>(std::chrono::steady_clock::now() - arrived).count());
}

// Enters the member's contribution under the lock, making the exchange when it is the first.
std::shared_ptr<CollectiveGroup::Exchange> CollectiveGroup::arrive(int member, std::uint64_t key, const float* in,
                                                                   std::int64_t n, float weight,
                                                                   std::string_view what) {
  if (!abort_reason_.empty()) throw RuntimeError(prefix(what) + "the group was aborted: " + abort_reason_);
  auto [it, fresh] = pending_.try_emplace(key);
  if (fresh) it->second = std::make_shared<Exchange>(members_, n);
  const std::shared_ptr<Exchange> e = it->second;
  const auto m = static_cast<std::size_t>(member);
  // Either mistake would leave the others waiting for a contribution that cannot come, so it fails them too.
  std::string mistake;
  if (e->present[m])
    mistake = "replica " + std::to_string(member) + " arrived twice (two all-reduces share an instance)";
  else if (e->n != n)
    mistake = "replica " + std::to_string(member) + " brought " + std::to_string(n) + " elements, another " +
              std::to_string(e->n);
  if (!mistake.empty()) {
    abort_locked(prefix(what) + mistake);
    throw RuntimeError(prefix(what) + mistake);
  }
  e->inputs[m] = in;
  e->weights[m] = weight;
  e->present[m] = 1;
  if (++e->count == members_) pending_.erase(it);
  return e;
}

void CollectiveGroup::wait_for_all(std::unique_lock<std::mutex>& lock, Exchange& e, std::string_view what) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout_);
  // Once every member has arrived the others read this member's input, and it sums its slice: it goes on
  // to the sum, abort or not.
  auto ready = [&] { return e.count == members_ || !abort_reason_.empty(); };
  if (!cv_.wait_until(lock, deadline, ready)) {
    e.timed_out = true;
    const std::string message = prefix(what) + missing_members(e) + " within " + format_seconds(timeout_) + " s";
    abort_locked(message);
    throw RuntimeError(message);
  }
  if (e.count == members_) return;
  // Another member of this exchange timed out: the same members are missing, said in this member's words.
  if (e.timed_out) throw RuntimeError(prefix(what) + missing_members(e) + " within " + format_seconds(timeout_) + " s");
  throw RuntimeError(prefix(what) + "the group was aborted: " + abort_reason_);
}

// "replica 1 of 2 did not arrive", "replicas 0, 2 of 3 did not arrive".
std::string CollectiveGroup::missing_members(const Exchange& e) const {
  std::string list;
  int missing = 0;
  for (int m = 0; m < members_; ++m) {
    if (e.present[static_cast<std::size_t>(m)]) continue;
    list += (missing++ == 0 ? "" : ", ") + std::to_string(m);
  }
  return (missing == 1 ? "replica " : "replicas ") + list + " of " + std::to_string(members_) + " did not arrive";
}

void CollectiveGroup::abort(const std::string& reason) {
  std::lock_guard lock(mu_);
  abort_locked(reason.empty() ? "aborted" : reason);
}

void CollectiveGroup::abort_locked(const std::string& reason) {
  if (abort_reason_.empty()) abort_reason_ = reason;
  // Waiting members keep their exchanges; nobody can join one any more.
  pending_.clear();
  cv_.notify_all();
}

void CollectiveGroup::recover() {
  std::lock_guard lock(mu_);
  abort_reason_.clear();
  pending_.clear();
}

bool CollectiveGroup::aborted() const {
  std::lock_guard lock(mu_);
  return !abort_reason_.empty();
}

std::size_t CollectiveGroup::in_flight() const {
  std::lock_guard lock(mu_);
  return pending_.size();
}

std::uint64_t collective_key(std::int64_t step, std::int64_t instance) {
  TCTL_CHECK(instance >= 0 && instance < kMaxCollectiveInstances, "all-reduce instance out of range");
  TCTL_CHECK(step >= 0 && step < (std::int64_t{1} << 43), "all-reduce step out of range");
  return (static_cast<std::uint64_t>(step) << 20) | static_cast<std::uint64_t>(instance);
}

std::string join_collective_on(const std::string& device, const std::shared_ptr<Collective>& collective, int member,
                               std::string* why) {
  if (is_cpu_name(device)) return "cpu";
  Device* d = DeviceRegistry::instance().find(device);
  std::string refusal = d == nullptr ? "device " + device + " is not available" : d->collective_refusal(*collective);
  std::uint64_t key = 0;
  if (collective->members_are_processes() && collective->members() > 1) {
    // Every member says whether it can, and the sum counts them: all take the device's path or none does (a
    // member on the CPU would leave the others waiting inside the device's all-reduce). The members make
    // these calls in one order, so a count of them gives each round its own keys.
    static std::atomic<std::int64_t> rounds{0};
    const std::int64_t round = rounds.fetch_add(1);
    float able = refusal.empty() ? 1.0f : 0.0f;
    collective->all_reduce(member, collective_key(2 * round, kJoinInstance), &able, 1, 1.0f, &able,
                           "the set-up of the all-reduce on " + device);
    const int unable = collective->members() - static_cast<int>(able);
    if (refusal.empty() && unable > 0)
      refusal = std::to_string(unable) + " of the " + std::to_string(collective->members()) +
                " workers cannot all-reduce on " + device;
    key = collective_key(2 * round + 1, kJoinInstance);
  }
  if (refusal.empty()) {
    d->join_collective(collective, member, key);
    return d->name();
  }
  // An absent device has its own warning from placement, which sends its nodes to the CPU.
  if (why != nullptr && d != nullptr) *why = "gradients all-reduced on the cpu: " + refusal;
  return "cpu";
}

}  // namespace tctl
