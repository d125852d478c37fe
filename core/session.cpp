#include "core/session.h"

#include <algorithm>
#include <array>
#include <set>

#include "core/device_graph.h"
#include "core/errors.h"

namespace tctl {

struct Session::Prepared {
  Plan plan;
  std::vector<std::int64_t> key;  // as in plans_, for the lock-free check against last_
  // The last run's frame, passed to the next run without a lock. Runs of this plan on several threads
  // at once need more frames; those wait in free_frames.
  std::atomic<Frame*> spare{nullptr};
  std::mutex mu;
  std::vector<std::unique_ptr<Frame>> free_frames TCTL_GUARDED_BY(mu);

  ~Prepared() { delete spare.load(std::memory_order_acquire); }

  std::unique_ptr<Frame> take_frame() {
    if (Frame* f = spare.exchange(nullptr, std::memory_order_acquire)) return std::unique_ptr<Frame>(f);
    std::lock_guard lock(mu);
    if (free_frames.empty()) return std::make_unique<Frame>(plan);
    auto f = std::move(free_frames.back());
    free_frames.pop_back();
    return f;
  }
  void give_back(std::unique_ptr<Frame> f) {
    Frame* empty = nullptr;
    if (spare.compare_exchange_strong(empty, f.get(), std::memory_order_release, std::memory_order_relaxed)) {
      f.release();
      return;
    }
    std::lock_guard lock(mu);
    free_frames.push_back(std::move(f));
  }
};

namespace {
thread_local Session* t_default_session = nullptr;
}  // namespace

Session::DefaultScope::DefaultScope(Session* s) : previous_(t_default_session) { t_default_session = s; }
Session::DefaultScope::~DefaultScope() { t_default_session = previous_; }

Session& default_session() {
  if (t_default_session == nullptr)
    throw GraphError(
        "this thread has no default session; a thread that continues another thread's model must "
        "install its session with session.as_default()");
  return *t_default_session;
}

Session::Session(std::shared_ptr<const Graph> graph, ThreadPool& inter, ThreadPool& intra, SessionOptions options)
    : graph_(std::move(graph)), inter_(inter), intra_(intra), options_(options) {}

Session::~Session() = default;

Session::Prepared& Session::prepare(std::span<const Feed> feeds, std::span<const Output> fetches,
                                    std::span<const Output> targets) {
  // The plan's key, built in a per-thread buffer so a steady-state run allocates nothing here. Negative
  // markers open each part; node ids, dtypes and fed dimensions are never negative.
  thread_local std::vector<std::int64_t> key;
  key.clear();
  for (const Feed& f : feeds) {
    key.push_back(-1);
    key.push_back(f.output.node);
    key.push_back(static_cast<std::int64_t>(f.value.dtype()));
    for (auto d : f.value.shape().dims()) key.push_back(d);
  }
  for (Output o : fetches) {
    key.push_back(-2);
    key.push_back(o.node);
  }
  for (Output o : targets) {
    key.push_back(-3);
    key.push_back(o.node);
  }
  if (Prepared* last = last_.load(std::memory_order_acquire); last != nullptr && last->key == key) return *last;

  std::lock_guard lock(mu_);
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    std::vector<Output> feed_outputs;
    std::vector<TensorSpec> feed_specs;
    for (const Feed& f : feeds) {
      feed_outputs.push_back(f.output);
      feed_specs.push_back({f.value.dtype(), f.value.shape()});
    }
    auto prepared = std::make_unique<Prepared>();
    prepared->plan = build_plan(*graph_, feed_outputs, feed_specs, fetches, targets, options_.placement);
    if (options_.device_graphs) plan_device_graphs(prepared->plan);
    // A plan for other feed shapes places the same nodes again: each line is reported once per session.
    for (const std::string& line : prepared->plan.placement_log)
      if (logged_.insert(line).second) options_.placement.log(line);
    prepared->key = key;
    it = plans_.emplace(key, std::move(prepared)).first;
  }
  last_.store(it->second.get(), std::memory_order_release);
  return *it->second;
}

std::vector<Tensor> Session::run(std::span<const Feed> feeds, std::span<const Output> fetches,
                                 std::span<const Output> targets, const RunOptions& options) {
  Prepared& prepared = prepare(feeds, fetches, targets);
  // The fed values side by side, as the executor takes them; on the stack for the usual few feeds.
  constexpr std::size_t kInlineFeeds = 4;
  std::array<Tensor, kInlineFeeds> inline_values;
  std::vector<Tensor> heap_values;
  std::span<Tensor> feed_values(inline_values.data(), feeds.size());
  if (feeds.size() > kInlineFeeds) {
    heap_values.resize(feeds.size());
    feed_values = heap_values;
  }
  for (std::size_t i = 0; i < feeds.size(); ++i) feed_values[i] = feeds[i].value;

  RunContext ctx;
  ctx.inter = &inter_;
  ctx.intra = &intra_;
  ctx.seed = options_.seed;
  ctx.step = options.step >= 0 ? options.step : next_step_.fetch_add(1, std::memory_order_relaxed);
  ctx.profiler = options.profiler;
  ctx.batch_offset = options.batch_offset;
  ctx.compute_type = options_.compute_type;
  ctx.device_graphs = options_.device_graphs;
  ctx.graph_replays = &graph_replays_;
  std::vector<std::string> graph_log;
  if (options_.device_graphs && options_.placement.log) ctx.graph_log = &graph_log;

  std::unique_ptr<Frame> frame = prepared.take_frame();
  std::vector<Tensor> out;
  {
    FlushDenormalsScope flush;
    try {
      Executor::run(prepared.plan, *frame, feed_values, ctx);
    } catch (...) {
      if (options.profiler != nullptr) options.profiler->collect();
      prepared.give_back(std::move(frame));
      log_once(graph_log);
      throw;
    }
  }
  log_once(graph_log);
  // Copy the node names now, while the graph is surely alive, and off the kernels' path.
  if (options.profiler != nullptr) options.profiler->collect();
  out.reserve(fetches.size());
  for (int s : prepared.plan.fetch_slots) out.push_back(frame->values()[static_cast<std::size_t>(s)]);
  prepared.give_back(std::move(frame));
  return out;
}

void Session::log_once(const std::vector<std::string>& lines) {
  if (lines.empty()) return;
  std::lock_guard lock(mu_);
  for (const std::string& line : lines)
    if (logged_.insert(line).second) options_.placement.log(line);
}

std::vector<std::string> Session::placement_warnings() const {
  std::lock_guard lock(mu_);
  std::set<std::string> seen;
  std::vector<std::string> out;
  for (const auto& [key, p] : plans_)
    for (const auto& w : p->plan.placement_warnings)
      if (seen.insert(w).second) out.push_back(w);
  return out;
}

}  // namespace tctl
