#include "core/executor.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <utility>

#include "core/device_graph.h"
#include "core/errors.h"
#include "core/kernel_context.h"
#include "core/ops/state.h"
#include "core/profiler.h"

namespace tctl {

void check_fed_spec(const Node& placeholder, const TensorSpec& fed) {
  if (fed.shape.compatible(placeholder.spec.shape) && fed.dtype == placeholder.spec.dtype) return;
  throw ShapeError(placeholder.name + ": fed " + std::string(dtype_name(fed.dtype)) + " " + fed.shape.to_string() +
                   " where the graph expects " + std::string(dtype_name(placeholder.spec.dtype)) + " " +
                   placeholder.spec.shape.to_string());
}

namespace {
// The cost (op_registry.h: multiply-adds, or elements read and written) from which a ready node is worth
// handing to another inter-op thread. The trip costs the node's inputs crossing to the other core's cache,
// and whatever follows it tends to stay on that core; a wake-up too where the worker sleeps, but an idle
// worker spins by the clock first (kSpinTime, thread_pool.cpp), longer than a small model's step. Handing
// off every ready node slows a small model's step; 2^18 is one 32x128x64 product of the digits MLP at batch
// 32, whose weight and input gradients then run side by side. Measured by `tensorctl profile
// configs/digits_mlp.json --inter-op-threads 1,2` (and the digits CNN) and bench_workloads mlp_digits_b32 at
// 2 threads; the figures are in bench/README.md, "Figures behind the constants in the code".
constexpr std::int64_t kHandOffCost = std::int64_t{1} << 18;

// In a plan that writes no variable (an inference pass), every variable read keeps its value between
// runs. A write elsewhere then copies the buffer the frame holds instead of changing it. A plan that
// writes keeps none: its own updates, or a value set between its runs (a learning rate), would copy on
// every step.
void mark_kept_reads(Plan& plan) {
  for (const PlanNode& pn : plan.nodes)
    if (pn.feed < 0)
      for (const VarUse& use : pn.node->vars)
        if (use.write) return;
  for (PlanNode& pn : plan.nodes) {
    if (pn.feed >= 0 || pn.node->op != &ops::read_variable()) continue;
    pn.keep_read = true;
    pn.release_after_use = false;
  }
}
}  // namespace

namespace {
// Adds one Copy node per value and destination device where an edge crosses devices, and reuses it for
// every consumer on that device.
class CopyInserter {
 public:
  explicit CopyInserter(Plan& plan) : plan_(plan) {}

  // The plan index holding the value of plan node `producer` on `device`.
  int on(int producer, Device* device) {
    const PlanNode& from = plan_.nodes[static_cast<std::size_t>(producer)];
    if (from.device == device) return producer;
    auto [it, added] = made_.emplace(std::pair{producer, device}, static_cast<int>(plan_.nodes.size()));
    if (!added) return it->second;
    auto node = std::make_unique<Node>();
    node->id = -1;  // not in the graph
    node->op = &ops::copy();
    node->name = from.node->name + "/copy_to_" + device->name();
    node->layer = from.node->layer;
    node->device = device->name();
    node->phase = from.node->phase;
    node->inputs = {from.node->id};
    node->spec = from.node->spec;
    PlanNode pn;
    pn.node = node.get();
    pn.device = device;
    pn.spec = from.spec;
    pn.inputs = {producer};
    pn.kernel = ops::copy().kernel(device->kind());
    plan_.copy_nodes.push_back(std::move(node));
    plan_.nodes.push_back(std::move(pn));
    return it->second;
  }

 private:
  Plan& plan_;
  std::map<std::pair<int, Device*>, int> made_;
};
// PlanNode::feed_anywhere: the fed nodes used only by copies and not fetched.
void mark_feeds_anywhere(Plan& plan) {
  for (PlanNode& pn : plan.nodes) pn.feed_anywhere = pn.feed >= 0 && pn.num_uses > 0;
  for (const PlanNode& pn : plan.nodes)
    if (pn.node->op != &ops::copy())
      for (int in : pn.inputs) plan.nodes[static_cast<std::size_t>(in)].feed_anywhere = false;
  for (int s : plan.fetch_slots) plan.nodes[static_cast<std::size_t>(s)].feed_anywhere = false;
}

// Successors, predecessor counts, use counts and roots: each edge counted once per predecessor, so a node
// that reads one input twice is released once. `slot` maps graph node ids to plan indices.
void link_edges(Plan& plan, const std::vector<int>& slot) {
  for (std::size_t i = 0; i < plan.nodes.size(); ++i) {
    PlanNode& pn = plan.nodes[i];
    if (pn.feed >= 0) continue;
    std::vector<int> preds = pn.inputs;
    for (int c : pn.node->control_inputs) preds.push_back(slot[static_cast<std::size_t>(c)]);
    std::sort(preds.begin(), preds.end());
    preds.erase(std::unique(preds.begin(), preds.end()), preds.end());
    for (int p : preds) plan.nodes[static_cast<std::size_t>(p)].successors.push_back(static_cast<int>(i));
    pn.num_predecessors = static_cast<int>(preds.size());
    for (int in : pn.inputs) ++plan.nodes[static_cast<std::size_t>(in)].num_uses;
  }
  for (std::size_t i = 0; i < plan.nodes.size(); ++i)
    if (plan.nodes[i].num_predecessors == 0) plan.roots.push_back(static_cast<int>(i));
}
}  // namespace

namespace {
// The nodes the fetches and targets need, walking back from them; a fed node needs nothing upstream.
std::vector<char> needed_nodes(const Graph& g, const std::vector<int>& feed_of, std::span<const Output> fetches,
                               std::span<const Output> targets) {
  std::vector<char> needed(static_cast<std::size_t>(g.size()), 0);
  std::vector<int> stack;
  for (Output o : fetches) stack.push_back(o.node);
  for (Output o : targets) stack.push_back(o.node);
  while (!stack.empty()) {
    int id = stack.back();
    stack.pop_back();
    if (needed[static_cast<std::size_t>(id)]) continue;
    needed[static_cast<std::size_t>(id)] = 1;
    if (feed_of[static_cast<std::size_t>(id)] >= 0) continue;
    for (int in : g.node(id).inputs) stack.push_back(in);
    for (int in : g.node(id).control_inputs) stack.push_back(in);
  }
  return needed;
}

// Fills a fed node's spec and release rule from its feed.
void plan_fed_node(PlanNode& pn, const Node& node, std::span<const TensorSpec> feed_specs) {
  pn.hand_off = false;
  // The caller keeps its own handle to a fed tensor; the frame lets go of it once consumed, so the
  // caller may refill the same buffer for the next step.
  pn.release_after_use = true;
  pn.spec = feed_specs[static_cast<std::size_t>(pn.feed)];
  check_fed_spec(node, pn.spec);
}

// Fills a computed node's inputs (through copies where they live elsewhere), spec, kernel and hand-off rule.
void plan_computed_node(PlanNode& pn, const Node& node, const std::vector<int>& slot,
                        const std::vector<TensorSpec>& specs, CopyInserter& copies) {
  if (node.op == &ops::placeholder()) throw RuntimeError("placeholder " + node.name + " must be fed");
  std::vector<TensorSpec> in_specs;
  for (int in : node.inputs) {
    pn.inputs.push_back(copies.on(slot[static_cast<std::size_t>(in)], pn.device));
    in_specs.push_back(specs[static_cast<std::size_t>(in)]);
  }
  pn.spec = node.op->infer(InferContext(in_specs, node.attrs, node.name));
  pn.kernel = node.op->kernel(pn.device->kind());
  // CPU nodes only. A device node (and a copy) keeps hand_off as before costs came in: its kernel
  // mostly queues work on a stream, but a copy to the host waits for it, and no GPU has measured what
  // a cheaper rule would do there.
  if (pn.device == cpu_device() && node.op->cost)
    pn.hand_off = node.op->cost(in_specs, pn.spec, node.attrs) >= kHandOffCost;
  TCTL_CHECK(pn.kernel != nullptr, "op " + node.op->name + " has no kernel for " + pn.device->name());
  pn.release_after_use = node.op->aliases_output;
}

// What follows the nodes: fetch slots, edges, release rules, stream devices and the placement log.
void finish_plan(Plan& plan, std::vector<int> fetch_slots, const std::vector<int>& slot,
                 const PlacementOptions& placement) {
  link_edges(plan, slot);
  mark_kept_reads(plan);
  for (int s : fetch_slots) {
    plan.fetch_slots.push_back(s);
    plan.nodes[static_cast<std::size_t>(s)].release_after_use = false;
  }
  mark_feeds_anywhere(plan);
  for (const PlanNode& pn : plan.nodes) plan.may_skip = plan.may_skip || pn.node->op->may_skip;
  for (const PlanNode& pn : plan.nodes)
    if (pn.device != cpu_device() &&
        std::find(plan.stream_devices.begin(), plan.stream_devices.end(), pn.device) == plan.stream_devices.end())
      plan.stream_devices.push_back(pn.device);
  if (placement.log)
    for (const PlanNode& pn : plan.nodes)
      plan.placement_log.push_back(pn.node->name + " (" + pn.node->op->name + "): " + pn.device->name());
}
}  // namespace

Plan build_plan(const Graph& g, std::span<const Output> feeds, std::span<const TensorSpec> feed_specs,
                std::span<const Output> fetches, std::span<const Output> targets, const PlacementOptions& placement) {
  const int n = g.size();
  std::vector<int> feed_of(static_cast<std::size_t>(n), -1);
  for (std::size_t i = 0; i < feeds.size(); ++i) feed_of[static_cast<std::size_t>(feeds[i].node)] = static_cast<int>(i);
  const std::vector<char> needed = needed_nodes(g, feed_of, fetches, targets);

  std::vector<char> fed(static_cast<std::size_t>(n), 0);
  for (int i = 0; i < n; ++i) fed[static_cast<std::size_t>(i)] = feed_of[static_cast<std::size_t>(i)] >= 0;
  Placement placed = place_nodes(g, needed, fed, placement);
  Plan plan;
  plan.placement_warnings = std::move(placed.warnings);
  CopyInserter copies(plan);
  std::vector<int> slot(static_cast<std::size_t>(n), -1);
  std::vector<TensorSpec> specs(static_cast<std::size_t>(n));
  for (const Node& node : g.nodes()) {
    if (!needed[static_cast<std::size_t>(node.id)]) continue;
    PlanNode pn;
    pn.node = &node;
    pn.device = placed.devices[static_cast<std::size_t>(node.id)];
    pn.feed = feed_of[static_cast<std::size_t>(node.id)];
    // A variable lives where the nodes using it run (placement colocates them).
    for (const VarUse& use : node.vars) use.var->place_on(pn.device);
    if (pn.feed >= 0)
      plan_fed_node(pn, node, feed_specs);
    else
      plan_computed_node(pn, node, slot, specs, copies);
    specs[static_cast<std::size_t>(node.id)] = pn.spec;
    slot[static_cast<std::size_t>(node.id)] = static_cast<int>(plan.nodes.size());
    plan.nodes.push_back(std::move(pn));
  }

  // Fetched values leave on the host.
  std::vector<int> fetch_slots;
  for (Output o : fetches) fetch_slots.push_back(copies.on(slot[static_cast<std::size_t>(o.node)], cpu_device()));
  finish_plan(plan, std::move(fetch_slots), slot, placement);
  return plan;
}

Frame::Frame(const Plan& plan)
    : values_(plan.nodes.size()),
      pending_(new std::atomic<int>[plan.nodes.size()]),
      uses_left_(new std::atomic<int>[plan.nodes.size()]),
      read_writes_(new std::uint64_t[plan.nodes.size()]()),
      dead_(plan.may_skip ? new char[plan.nodes.size()]() : nullptr) {}

Frame::~Frame() = default;

namespace {

// The state of one Executor::run, shared by every thread working on it.
struct Run {
  const Plan& plan;
  Frame& frame;
  std::span<const Tensor> feeds;
  const RunContext& ctx;
  std::vector<Tensor>& values;
  std::atomic<int>* pending;
  std::atomic<int>* uses_left;
  std::atomic<int>& remaining;
  std::atomic<bool>& failed;
  bool shared;  // whether other inter-op threads may take nodes of this run
  // While a segment records: per node, the staging buffer a staged Copy reads instead of its input (null: none).
  const Tensor* const* staged_input = nullptr;

  void execute(int i) {
    const PlanNode& pn = plan.nodes[static_cast<std::size_t>(i)];
    if (pn.feed >= 0) {
      // Feeds arrive on the host, or stay where they are when only copies use them.
      const Tensor& fed = feeds[static_cast<std::size_t>(pn.feed)];
      values[static_cast<std::size_t>(i)] = fed.device() == pn.device || pn.feed_anywhere ? fed : fed.to(pn.device);
      return;
    }
    if (failed.load(std::memory_order_relaxed)) return;
    if (plan.may_skip && reads_dead(pn)) {
      frame.dead_[i] = 1;
      values[static_cast<std::size_t>(i)].reset();
      return;
    }
    // A kept variable read whose value in the frame is still current needs no kernel call (the kernel
    // makes the same test; a profiled run calls it, to time it). bench_workloads infer_b1 measures the saving.
    if (pn.keep_read && ctx.profiler == nullptr &&
        pn.node->vars[0].var->holds_current(values[static_cast<std::size_t>(i)], frame.read_writes_[i]))
      return;
    constexpr std::size_t kInline = 8;
    const Tensor* inline_inputs[kInline];
    std::vector<const Tensor*> heap_inputs;
    const Tensor** inputs = inline_inputs;
    if (pn.inputs.size() > kInline) {
      heap_inputs.resize(pn.inputs.size());
      inputs = heap_inputs.data();
    }
    for (std::size_t k = 0; k < pn.inputs.size(); ++k) inputs[k] = &values[static_cast<std::size_t>(pn.inputs[k])];
    if (staged_input != nullptr && staged_input[i] != nullptr) inputs[0] = staged_input[i];
    try {
      // Placement put a copy on every edge that crosses devices: a kernel only ever sees its own device's
      // buffers (a Copy node excepted, whose input is on the other side by definition).
      if (pn.node->op != &ops::copy())
        for (std::size_t k = 0; k < pn.inputs.size(); ++k)
          TCTL_CHECK(
              inputs[k]->device() == pn.device || !inputs[k]->defined(),
              pn.node->name + " on " + pn.device->name() + " was given an input on " + inputs[k]->device()->name());
      KernelContext kc(*pn.node, *pn.device, pn.spec, inputs, values[static_cast<std::size_t>(i)], *ctx.intra, ctx.seed,
                       ctx.step);
      if (pn.keep_read) kc.set_kept_read(&frame.read_writes_[i]);
      kc.set_batch_offset(ctx.batch_offset);
      kc.set_compute_type(ctx.compute_type);
      if (pn.device != cpu_device()) pn.device->make_current();
      if (ctx.profiler == nullptr) {
        pn.kernel(kc);
      } else {
        run_profiled(pn, kc, inputs);
      }
      if (kc.skipped()) {
        TCTL_CHECK(plan.may_skip, pn.node->name + " skipped, but its op is not marked may_skip");
        frame.dead_[i] = 1;
        values[static_cast<std::size_t>(i)].reset();
      }
    } catch (...) {
      record_error(std::current_exception());
    }
  }

  // Runs the kernel timed on the host and, where its work goes to a device with a stream, between two
  // timed events of that stream, which the profiler resolves once the run has synchronized its devices.
  void run_profiled(const PlanNode& pn, KernelContext& kc, const Tensor* const* inputs) {
    // A copy to the host is work on the stream of the device it copies from.
    Device* stream = pn.device;
    if (pn.node->op == &ops::copy() && pn.device->kind() == DeviceKind::cpu() && inputs[0]->defined())
      stream = inputs[0]->device();
    const auto start = Profiler::Clock::now();
    if (stream->kind() == DeviceKind::cpu()) {
      pn.kernel(kc);
      ctx.profiler->record(*pn.node, start, Profiler::Clock::now(), {.device = stream});
      return;
    }
    DeviceWork work{.device = stream, .before = stream->record_timed_event()};
    pn.kernel(kc);
    work.after = stream->record_timed_event();
    ctx.profiler->record(*pn.node, start, Profiler::Clock::now(), std::move(work));
  }

  bool reads_dead(const PlanNode& pn) const {
    for (int in : pn.inputs)
      if (frame.dead_[in] != 0) return true;
    return false;
  }

  void record_error(std::exception_ptr e) {
    std::lock_guard lock(frame.mu_);
    if (!frame.error_) frame.error_ = e;
    failed.store(true, std::memory_order_relaxed);
  }

  // Counts a counter down by one and returns its value before. A run that cannot hand nodes off has no
  // other thread touching its counters, so there a plain load and store do, without a locked instruction.
  int count_down(std::atomic<int>& c) const {
    if (shared) return c.fetch_sub(1, std::memory_order_acq_rel);
    const int before = c.load(std::memory_order_relaxed);
    c.store(before - 1, std::memory_order_relaxed);
    return before;
  }

  // Runs node `first` and whatever it makes ready, on this thread except for costly nodes it cannot run
  // alone (below).
  void run_from(int first) { run_from(std::span(&first, 1)); }

  // The same from several nodes, the last one first. Cheap ready nodes (PlanNode::hand_off false) run here,
  // in the order they became ready. A costly one waits until this thread has no cheap node left: the cheap
  // ones may make more costly nodes ready (the second branch of a Parallel behind the first branch's long
  // op), and then all but one of them go to the pool, when it has workers. The one kept runs where its
  // inputs were made, in this core's cache.
  void run_from(std::span<const int> firsts) {
    ReadyStack local, costly;
    for (int first : firsts) local.push(first);
    while (!local.empty() || !costly.empty()) {
      int i;
      if (!local.empty()) {
        i = local.pop();
        if (shared && plan.nodes[static_cast<std::size_t>(i)].hand_off) {
          costly.push(i);
          continue;
        }
      } else {
        i = costly.pop();
        while (!costly.empty()) hand_off(costly.pop());
      }
      execute(i);
      const PlanNode& pn = plan.nodes[static_cast<std::size_t>(i)];
      release_after(i);
      for (int s : pn.successors)
        if (count_down(pending[s]) == 1) local.push(s);
      // A run nobody else works on needs no wake-up: its caller is the thread that just finished it.
      if (count_down(remaining) == 1 && shared) {
        std::lock_guard lock(frame.mu_);
        frame.done_ = true;
        frame.cv_.notify_all();
      }
    }
  }

  // Lets go of the values node i was the last to read.
  void release_after(int i) {
    const PlanNode& pn = plan.nodes[static_cast<std::size_t>(i)];
    // An aliasing value nobody reads (a read kept only for ordering) is let go at once, or a later
    // in-place update of its variable would have to copy.
    if (pn.release_after_use && pn.num_uses == 0) values[static_cast<std::size_t>(i)].reset();
    for (int in : pn.inputs) {
      const PlanNode& producer = plan.nodes[static_cast<std::size_t>(in)];
      if (producer.release_after_use && count_down(uses_left[in]) == 1) values[static_cast<std::size_t>(in)].reset();
    }
  }

  // The run with device graphs (core/device_graph.h): Plan::graph_order on this thread, each segment
  // replayed, recorded or run eagerly.
  void run_in_order(DeviceGraphs& graphs) {
    for (int entry : plan.graph_order) {
      if (entry < 0) {
        // Staging copies, and the error of a replay that surfaces at the next wait, throw here.
        try {
          run_segment(-1 - entry, graphs);
        } catch (...) {
          record_error(std::current_exception());
        }
        continue;
      }
      execute(entry);
      release_after(entry);
    }
  }

  void run_segment(int s, DeviceGraphs& graphs) {
    const GraphSegment& seg = plan.graph_segments[static_cast<std::size_t>(s)];
    SegmentState& state = graphs.segments[static_cast<std::size_t>(s)];
    if (failed.load(std::memory_order_relaxed)) return;
    if (!seg.refused.empty()) {
      if (ctx.graph_log != nullptr) note(seg.name + ": runs eagerly: " + seg.refused);
      return run_eagerly(seg);
    }
    if (!state.refused.empty()) return run_eagerly(seg);
    if (reads_dead_outside(seg)) {
      // Its dead members let go of their outputs: the recording names buffers no longer held.
      state.replay.reset();
      return run_eagerly(seg);
    }
    stage(seg, state, graphs);
    // A replay reads no slot of a variable read; an eager run of an earlier segment may have filled them.
    for (int p : seg.borrowed) values[static_cast<std::size_t>(p)].reset();
    // A reader elsewhere (another frame's kept read) may hold a buffer the segment writes in place: the copy a
    // write would make happens here, and the moved buffer makes the segment record again.
    for (Variable* v : seg.written) v->own_buffer();
    if (state.replay != nullptr) {
      segment_signature(seg, state, values, ctx.batch_offset, state.current);
      const std::vector<const void*>& now = state.current;
      if (now == state.signature) {
        state.moves = 0;
        state.replay->launch(ctx.step);
        for (int m : seg.members) release_after(m);
        if (ctx.graph_replays != nullptr) ctx.graph_replays->fetch_add(1, std::memory_order_relaxed);
        return;
      }
      std::string moved;
      for (std::size_t k = 0; k < now.size() && k < state.signature.size(); ++k)
        if (now[k] != state.signature[k]) moved += (moved.empty() ? "" : ", ") + signature_entry_name(plan, seg, k);
      if (++state.moves >= kMaxGraphMoves) {
        refuse(seg, state, moved + " moved in " + std::to_string(kMaxGraphMoves) + " runs in a row");
        return run_eagerly(seg);
      }
      note(seg.name + ": recorded again: " + moved + " moved");
    }
    record(seg, state, graphs);
  }

  // Records the segment's members, then launches the recording: that launch is this run's work.
  void record(const GraphSegment& seg, SegmentState& state, DeviceGraphs& graphs) {
    state.replay.reset();
    fill_borrowed(seg);
    std::unique_ptr<Recording> recording;
    try {
      recording = seg.device->begin_recording();
    } catch (const std::exception& e) {
      refuse(seg, state, std::string("recording failed: ") + e.what());
      return run_eagerly(seg);
    }
    staged_input = graphs.staged_input.data();
    capture_members(seg);
    staged_input = nullptr;
    if (failed.load(std::memory_order_relaxed)) {
      // Nothing recorded has run: drop it, and run the segment as usual, now and from now on.
      recording.reset();
      refuse(seg, state, "recording failed: " + take_error_message());
      return run_eagerly(seg);
    }
    try {
      state.replay = recording->finish();
    } catch (const std::exception& e) {
      // Nothing recorded has run here either (a GPU that cannot instantiate the graph).
      recording.reset();
      refuse(seg, state, std::string("recording failed: ") + e.what());
      return run_eagerly(seg);
    }
    recording.reset();
    note(seg.name + ": recorded");
    // Launched before the frame lets anything go: the recording reads what the frame holds now.
    state.replay->launch(ctx.step);
    for (int m : seg.members) release_after(m);
    for (int p : seg.lent) values[static_cast<std::size_t>(p)].reset();
    for (int p : seg.borrowed) values[static_cast<std::size_t>(p)].reset();
    segment_signature(seg, state, values, ctx.batch_offset, state.signature);
  }

  // Runs the members into the recording. Each variable read of the segment is let go once its last reader
  // in it has run, as an eager run lets it go: an update of the variable after them then takes its buffer
  // as its own. Held, the update would copy the buffer when it is recorded, and every replay would copy
  // the recording's buffer over the variable's again before updating (tests/core/device_graph_test.cpp).
  // Only the slots are emptied; the use counts stay for release_after, and an eager run after a failed
  // recording reads them again (as members, or through fill_borrowed).
  void capture_members(const GraphSegment& seg) {
    std::vector<std::pair<int, int>> readers;  // (read, readers left among the members)
    for (const std::vector<int>* reads : {&seg.lent, &seg.borrowed})
      for (int p : *reads) readers.emplace_back(p, 0);
    for (int m : seg.members)
      for (int in : plan.nodes[static_cast<std::size_t>(m)].inputs)
        for (auto& [p, left] : readers) left += in == p ? 1 : 0;
    for (int m : seg.members) {
      execute(m);
      for (auto& [p, left] : readers) {
        if (p == m && left == 0) values[static_cast<std::size_t>(p)].reset();  // a read kept only for order
        for (int in : plan.nodes[static_cast<std::size_t>(m)].inputs)
          if (in == p && --left == 0) values[static_cast<std::size_t>(p)].reset();
      }
    }
  }

  void run_eagerly(const GraphSegment& seg) {
    fill_borrowed(seg);
    for (int m : seg.members) {
      execute(m);
      release_after(m);
    }
  }

  // Reads again the variables another segment's reads hand this one, where a replay left their slots empty:
  // those its members read in place, and those its staged copies take.
  void fill_borrowed(const GraphSegment& seg) {
    for (int p : seg.borrowed)
      if (!values[static_cast<std::size_t>(p)].defined()) execute(p);
    for (int m : seg.staged) staged_source(m);
  }

  // The value staged Copy member m takes. A variable read of another segment, whose slot that segment's
  // recording or replay emptied, reads the variable again.
  const Tensor& staged_source(int m) {
    const int producer = plan.nodes[static_cast<std::size_t>(m)].inputs[0];
    if (!values[static_cast<std::size_t>(producer)].defined()) execute(producer);
    return values[static_cast<std::size_t>(producer)];
  }

  // Copies each staged Copy member's input into the segment's staging buffer for it, on the segment's
  // device: a recorded copy then reads device memory only. One from the host would read the host buffer
  // when it is replayed, which a GPU allows only from pinned memory, and which the next step may refill
  // before the replay has run.
  void stage(const GraphSegment& seg, SegmentState& state, DeviceGraphs& graphs) {
    state.staging.resize(seg.staged.size());
    for (std::size_t k = 0; k < seg.staged.size(); ++k) {
      const int m = seg.staged[k];
      const Tensor& value = staged_source(m);
      Tensor& staging = state.staging[k];
      if (!staging.defined() || !(staging.shape() == value.shape()) || staging.dtype() != value.dtype())
        staging = Tensor::empty(value.dtype(), value.shape(), seg.device);
      copy_between(*value.device(), value.raw_data(), *seg.device, staging.raw_mutable_data(), value.bytes());
      graphs.staged_input[static_cast<std::size_t>(m)] = &staging;
    }
  }

  bool reads_dead_outside(const GraphSegment& seg) const {
    if (!plan.may_skip) return false;
    for (int m : seg.members)
      for (int in : plan.nodes[static_cast<std::size_t>(m)].inputs)
        if (frame.dead_[in] != 0) return true;
    return false;
  }

  void refuse(const GraphSegment& seg, SegmentState& state, std::string why) {
    state.replay.reset();
    state.refused = std::move(why);
    note(seg.name + ": runs eagerly: " + state.refused);
  }

  void note(std::string line) const {
    if (ctx.graph_log != nullptr) ctx.graph_log->push_back("device graph: " + std::move(line));
  }

  // The error a kernel recorded, as text, and the run no longer failed.
  std::string take_error_message() {
    std::exception_ptr error;
    {
      std::lock_guard lock(frame.mu_);
      error = std::exchange(frame.error_, nullptr);
    }
    failed.store(false, std::memory_order_relaxed);
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      return e.what();
    } catch (...) {
      return "an unknown error";
    }
  }

  // Queues node i on the inter-op pool, for whichever of its threads is free first.
  void hand_off(int i) {
    ctx.inter->schedule([this, i] {
      apply_denormal_setting();
      run_from(i);
    });
  }

  // The nodes one thread will run next, last in first out. Most graphs never hold more than a few ready
  // nodes at once, so the first ones sit in the object itself and a run allocates nothing for them.
  class ReadyStack {
   public:
    bool empty() const { return size_ == 0 && overflow_.empty(); }
    void push(int i) {
      if (overflow_.empty() && size_ < inline_.size()) {
        inline_[size_++] = i;
      } else {
        overflow_.push_back(i);
      }
    }
    int pop() {
      if (!overflow_.empty()) {
        const int i = overflow_.back();
        overflow_.pop_back();
        return i;
      }
      return inline_[--size_];
    }

   private:
    std::array<int, 16> inline_;
    std::size_t size_ = 0;
    std::vector<int> overflow_;
  };
};

}  // namespace

namespace {
// The caller is one of the inter-op threads: while the run is unfinished it takes queued nodes itself,
// and only when there are none does it spin briefly, then sleep until the run is done.
void help_until_done(Frame& frame, const RunContext& ctx) {
  int idle = 0;
  while (frame.remaining_.load(std::memory_order_acquire) > 0) {
    if (ctx.inter->try_run_one()) {
      idle = 0;
      continue;
    }
    if (++idle < 2000) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      continue;
    }
    std::unique_lock lock(frame.mu_);
    frame.cv_.wait_for(lock, std::chrono::microseconds(200), [&] { return frame.done_; });
    idle = 0;
  }
  std::unique_lock lock(frame.mu_);
  frame.cv_.wait(lock, [&] { return frame.done_; });
}

// The frame's device graphs when this run goes through them (core/device_graph.h), else null: a run without
// them, a plan without segments, a profiled run (it times each node), and a frame's first run, which warms up.
DeviceGraphs* graphs_for(const Plan& plan, Frame& frame, const RunContext& ctx) {
  if (!ctx.device_graphs || plan.graph_segments.empty()) return nullptr;
  if (ctx.profiler != nullptr) {
    if (ctx.graph_log != nullptr) ctx.graph_log->push_back("device graph: none while profiling, which times each node");
    return nullptr;
  }
  if (frame.graphs_ == nullptr) {
    frame.graphs_ = std::make_unique<DeviceGraphs>(plan);
    frame.graphs_->staged_input.assign(plan.nodes.size(), nullptr);
  }
  return frame.graphs_->runs++ == 0 ? nullptr : frame.graphs_.get();
}
}  // namespace

void Executor::run(const Plan& plan, Frame& frame, std::span<const Tensor> feeds, const RunContext& ctx) {
  TCTL_CHECK(ctx.intra != nullptr, "Executor::run needs an intra-op pool");
  const int n = static_cast<int>(plan.nodes.size());
  for (int i = 0; i < n; ++i) {
    frame.pending_[i].store(plan.nodes[static_cast<std::size_t>(i)].num_predecessors, std::memory_order_relaxed);
    frame.uses_left_[i].store(plan.nodes[static_cast<std::size_t>(i)].num_uses, std::memory_order_relaxed);
  }
  frame.remaining_.store(n, std::memory_order_relaxed);
  frame.failed_.store(false, std::memory_order_relaxed);
  if (plan.may_skip) std::fill_n(frame.dead_.get(), n, char{0});
  DeviceGraphs* graphs = graphs_for(plan, frame, ctx);
  const bool can_hand_off = graphs == nullptr && ctx.inter != nullptr && ctx.inter->num_workers() > 0;
  if (can_hand_off) {
    std::lock_guard lock(frame.mu_);
    frame.done_ = n == 0;
  }
  Run run{plan,
          frame,
          feeds,
          ctx,
          frame.values_,
          frame.pending_.get(),
          frame.uses_left_.get(),
          frame.remaining_,
          frame.failed_,
          can_hand_off};
  if (graphs != nullptr) {
    run.run_in_order(*graphs);
  } else {
    // The roots start on the caller, the first one last, as any ready nodes do (Run::run_from).
    std::vector<int>& roots = frame.caller_roots_;
    roots.assign(plan.roots.begin(), plan.roots.end());
    if (!roots.empty()) std::reverse(roots.begin() + 1, roots.end());
    run.run_from(roots);
    if (can_hand_off) help_until_done(frame, ctx);
  }
  for (Device* d : plan.stream_devices) {
    try {
      d->synchronize();
    } catch (...) {
      run.record_error(std::current_exception());
    }
  }
  // The thread that finished the run set done_ under the lock, after any error was recorded under it, so
  // the flag read here is the final one. The error leaves the frame, so the next run starts without one.
  if (frame.failed_.load(std::memory_order_relaxed)) {
    std::exception_ptr error;
    {
      std::lock_guard lock(frame.mu_);
      error = std::exchange(frame.error_, nullptr);
    }
    std::rethrow_exception(error);
  }
}

}  // namespace tctl
