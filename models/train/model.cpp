#include "models/train/model.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "core/autodiff.h"
#include "core/device.h"
#include "core/eager.h"
#include "core/errors.h"
#include "core/ops/state.h"
#include "core/placement.h"
#include "core/text.h"

#include <fmt/format.h>

namespace tctl {

double metric(const MetricValues& values, const std::string& name) {
  for (const auto& [n, v] : values)
    if (n == name) return v;
  return std::nan("");
}

// The feeds and fetches of one traced graph.
struct Model::Pass {
  Output x;
  Output targets;
  Output predictions;
  Output scores;       // what the metrics read (LossOutputs::scores)
  Output loss;         // scalar mean
  Output per_example;  // [batch]
  Output weight;       // mirrored training: this replica's share of the batch's rows (a float scalar)
  std::vector<Output> updates;
};

struct Model::Traced {
  const Sequential& net;
  Optimizer& optimizer;
  const std::string& device;
  int member = -1;  // the replica's member of the all-reduce group; -1: no all-reduce (one replica, eager)
};

// A replica after the first: its own network, optimizer, pools, training graph and session; and the
// buffers of its rows of a step.
struct Model::Replica {
  Replica(std::shared_ptr<Sequential> n, const ModelOptions& o, std::string d, int threads_inter, int threads_intra)
      : net(std::move(n)),
        optimizer(o.optimizer),
        device(std::move(d)),
        inter_pool(threads_inter),
        intra_pool(threads_intra) {}
  std::shared_ptr<Sequential> net;
  Optimizer optimizer;
  std::string device;
  ThreadPool inter_pool;
  ThreadPool intra_pool;
  std::shared_ptr<Graph> graph = std::make_shared<Graph>();
  Pass pass;
  std::unique_ptr<Session> session;
};

// The threads of replicas 1..n-1, kept for the model's life: run() hands each its part of a step and
// returns when every part is done, the first replica's run on the caller's thread meanwhile.
class Model::ReplicaThreads {
 public:
  explicit ReplicaThreads(int replicas) {
    for (int r = 1; r < replicas; ++r) threads_.emplace_back([this, r] { loop(r); });
  }
  ~ReplicaThreads() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    start_.notify_all();
    for (auto& t : threads_) t.join();
  }
  ReplicaThreads(const ReplicaThreads&) = delete;
  ReplicaThreads& operator=(const ReplicaThreads&) = delete;

  // fn(r) for every replica r; fn must not throw.
  void run(const std::function<void(int)>& fn) {
    {
      std::lock_guard lock(mu_);
      fn_ = &fn;
      left_ = static_cast<int>(threads_.size());
      ++generation_;
    }
    start_.notify_all();
    fn(0);
    std::unique_lock lock(mu_);
    done_.wait(lock, [&] { return left_ == 0; });
    fn_ = nullptr;
  }

 private:
  void loop(int r) {
    std::uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* fn = nullptr;
      {
        std::unique_lock lock(mu_);
        start_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        fn = fn_;
      }
      (*fn)(r);
      std::lock_guard lock(mu_);
      if (--left_ == 0) done_.notify_one();
    }
  }

  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* fn_ TCTL_GUARDED_BY(mu_) = nullptr;
  int left_ TCTL_GUARDED_BY(mu_) = 0;
  std::uint64_t generation_ TCTL_GUARDED_BY(mu_) = 0;
  bool stop_ TCTL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

namespace {

void check_metrics(const ModelOptions& o) {
  for (std::size_t i = 0; i < o.metrics.size(); ++i) {
    const std::string& m = o.metrics[i];
    const auto& known = loss_metrics(o.loss);
    if (std::find(known.begin(), known.end(), m) == known.end()) {
      throw SpecError(o.config_file, "metrics[" + std::to_string(i) + "]",
                      "metric \"" + m + "\" does not apply to loss " + o.loss + " (known: " + join(known) + ")");
    }
  }
}

// Threads of a pool for each of `replicas`: as asked, or with 0 (one per core) the cores shared out.
int threads_per_replica(int asked, std::size_t replicas) {
  if (asked > 0 || replicas <= 1) return asked;
  return std::max(1, ThreadPool::hardware_threads() / static_cast<int>(replicas));
}

// Model::input_device: the one device besides the CPU that every use of `x` in `g` is placed on, as a
// session placing `g` with `placement` would place it; nullptr otherwise.
Device* device_using(const Graph& g, Output x, Output targets, PlacementOptions placement) {
  placement.log = nullptr;
  const Output fed[] = {x, targets};
  const Placement placed = place_all(g, fed, placement);
  Device* found = nullptr;
  for (const Node& node : g.nodes()) {
    Device* d = placed.devices[static_cast<std::size_t>(node.id)];
    if (d == nullptr || std::find(node.inputs.begin(), node.inputs.end(), x.node) == node.inputs.end()) continue;
    if (d == cpu_device() || (found != nullptr && found != d)) return nullptr;
    found = d;
  }
  return found;
}

std::vector<std::shared_ptr<Sequential>> one_net(std::shared_ptr<Sequential> net) {
  std::vector<std::shared_ptr<Sequential>> nets;
  nets.push_back(std::move(net));
  return nets;
}

}  // namespace

Model::Model(std::shared_ptr<Sequential> net, ModelOptions options)
    : Model(one_net(std::move(net)), std::move(options)) {}

Model::Model(std::vector<std::shared_ptr<Sequential>> nets, ModelOptions options)
    : net_(nets.at(0)),
      options_(std::move(options)),
      optimizer_(options_.optimizer),
      inter_pool_(threads_per_replica(options_.inter_op_threads, nets.size())),
      intra_pool_(threads_per_replica(options_.intra_op_threads, nets.size())) {
  const bool inference_only = options_.loss.empty();
  TCTL_CHECK(!inference_only ||
                 (nets.size() == 1 && !options_.workers && options_.hogwild_workers <= 1 && options_.metrics.empty()),
             "a model without a loss is one replica without metrics");
  check_metrics(options_);
  backend_flag("allow_tf32").store(options_.allow_tf32, std::memory_order_relaxed);
  const bool in_process = options_.replica_devices.size() > 1;
  TCTL_CHECK(!(in_process && options_.workers), "a model is mirrored in-process or across workers, not both");
  TCTL_CHECK(nets.size() == (in_process ? options_.replica_devices.size() : 1),
             "a mirrored model needs one network per replica device");
  if (in_process) {
    options_.device = options_.replica_devices[0];
    group_ = CollectiveGroup::create(static_cast<int>(nets.size()));
    collective_ = group_;
    members_ = static_cast<int>(nets.size());
  } else if (options_.workers) {
    collective_ = options_.workers;
    members_ = collective_->members();
    first_member_ = options_.worker;
    TCTL_CHECK(first_member_ >= 0 && first_member_ < members_, "worker out of range");
  }

  infer_graph_ = std::make_shared<Graph>();
  infer_pass_ = std::make_unique<Pass>();
  trace_forward(*infer_graph_, *infer_pass_, false, first_replica(-1));
  if (!inference_only) {
    train_graph_ = std::make_shared<Graph>();
    train_pass_ = std::make_unique<Pass>();
    trace_training(*train_graph_, *train_pass_, first_replica(collective_ ? first_member_ : -1));
    if (options_.auto_control_dependencies) add_auto_control_dependencies(*train_graph_);
  }

  // Where each node runs is settled now, before a caller writes anything, not at the first step: a device
  // strict placement refuses throws here, and the nodes soft placement moves to the CPU are known up front.
  for (const auto& [graph, pass] :
       {std::pair{train_graph_.get(), train_pass_.get()}, std::pair{infer_graph_.get(), infer_pass_.get()}}) {
    if (graph == nullptr) continue;
    std::vector<Output> fed{pass->x};
    if (!inference_only) fed.push_back(pass->targets);
    note_placement_warnings(place_all(*graph, fed, options_.placement).warnings);
  }
  SessionOptions so;
  so.seed = options_.seed;
  so.placement = options_.placement;
  if (!inference_only) train_session_ = std::make_unique<Session>(train_graph_, inter_pool_, intra_pool_, so);
  infer_session_ = std::make_unique<Session>(infer_graph_, inter_pool_, intra_pool_, so);

  for (std::size_t r = 1; r < nets.size(); ++r) {
    auto rep = std::make_unique<Replica>(std::move(nets[r]), options_, options_.replica_devices[r],
                                         threads_per_replica(options_.inter_op_threads, nets.size()),
                                         threads_per_replica(options_.intra_op_threads, nets.size()));
    trace_training(*rep->graph, rep->pass, Traced{*rep->net, rep->optimizer, rep->device, static_cast<int>(r)});
    if (options_.auto_control_dependencies) add_auto_control_dependencies(*rep->graph);
    const Output fed[] = {rep->pass.x, rep->pass.targets, rep->pass.weight};
    note_placement_warnings(place_all(*rep->graph, fed, options_.placement).warnings);
    rep->session = std::make_unique<Session>(rep->graph, rep->inter_pool, rep->intra_pool, so);
    others_.push_back(std::move(rep));
  }
  if (options_.hogwild_workers > 1) {
    TCTL_CHECK(!collective_, "hogwild shares one replica's variables; it is not mirrored");
    hogwild_ = options_.hogwild_workers;
    members_ = hogwild_;
  } else if (options_.hogwild_workers == 1) {
    // One worker takes the plain step, which is exactly its update; it is counted like the others'.
    hogwild_ = 1;
  }
  if (in_process || hogwild_ > 1) threads_ = std::make_unique<ReplicaThreads>(in_process ? replicas() : hogwild_);
  if (train_graph_ != nullptr && others_.empty() && collective_ == nullptr && hogwild_ <= 1)
    input_device_ = device_using(*train_graph_, train_pass_->x, train_pass_->targets, options_.placement);
  sync_replicas();
}

const Sequential& Model::replica_net(int r) const {
  TCTL_CHECK(r >= 0 && r < replicas(), "replica out of range");
  return r == 0 ? *net_ : *others_[static_cast<std::size_t>(r - 1)]->net;
}

Model::Traced Model::first_replica(int member) { return Traced{*net_, optimizer_, options_.device, member}; }

namespace {

// The instances of the all-reduces a mirrored step makes besides its gradient buckets (0, 1, ...).
constexpr std::int64_t kResultsInstance = kMaxCollectiveInstances - 1;     // every replica's loss and predictions
constexpr std::int64_t kStatisticsInstance = kMaxCollectiveInstances - 2;  // the moving statistics
constexpr std::int64_t kSyncInstance = kMaxCollectiveInstances - 3;        // sync_replicas across workers

// The first row of member m's share of a batch split evenly between `members`, the first ones taking one
// more where they do not divide; member `members` gives the batch's end.
std::int64_t first_row_of_member(std::int64_t batch, std::int64_t members, std::int64_t m) {
  return m * (batch / members) + std::min(m, batch % members);
}

std::vector<float> packed_values(const std::vector<std::shared_ptr<Variable>>& vars) {
  std::vector<float> out;
  for (const auto& v : vars) {
    const std::vector<float> f = v->read().to(cpu_device()).to_floats();
    out.insert(out.end(), f.begin(), f.end());
  }
  return out;
}

void assign_packed(const std::vector<std::shared_ptr<Variable>>& vars, const std::vector<float>& values) {
  std::size_t at = 0;
  for (const auto& v : vars) {
    const auto n = static_cast<std::size_t>(v->shape().num_elements());
    v->assign(Tensor::from_floats(v->shape(), std::span<const float>(values).subspan(at, n)));
    at += n;
  }
}

}  // namespace

void Model::sync_replicas() {
  if (multi_worker()) {
    // Rank 0's values to every rank: an all-reduce where rank 0 weighs 1 and the others 0.
    std::vector<std::shared_ptr<Variable>> vars = net_->variables();
    for (auto& v : optimizer_.state()) vars.push_back(std::move(v));
    std::vector<float> values = packed_values(vars);
    collective_->all_reduce(first_member_, collective_key(syncs_++, kSyncInstance), values.data(),
                            static_cast<std::int64_t>(values.size()), first_member_ == 0 ? 1.0f : 0.0f, values.data(),
                            "the weights of rank 0");
    assign_packed(vars, values);
    return;
  }
  const auto& from = net_->variables();
  const auto from_state = optimizer_.state();
  for (const auto& rep : others_) {
    const auto& to = rep->net->variables();
    const auto to_state = rep->optimizer.state();
    TCTL_CHECK(to.size() == from.size() && to_state.size() == from_state.size(), "replicas built unalike");
    for (std::size_t i = 0; i < from.size(); ++i) to[i]->assign(from[i]->read());
    for (std::size_t i = 0; i < from_state.size(); ++i) to_state[i]->assign(from_state[i]->read());
  }
}

bool Model::stop_requested() const {
  if (multi_worker()) return stop_agreed_;
  return stop_flag_ != nullptr && stop_flag_->load(std::memory_order_relaxed);
}

HogwildTotals Model::hogwild_totals() const {
  if (hogwild_ == 0) return {};
  const double counter = optimizer_.state().back()->read().to(cpu_device()).item();
  return {mirrored_steps_, hogwild_updates_, static_cast<std::int64_t>(std::llround(counter - hogwild_counter_start_))};
}

AllReduceTotals Model::all_reduce_totals() const {
  if (collective_ == nullptr) return {};
  const Collective::Stats s = collective_->stats(first_member_);
  return {mirrored_steps_, s.calls, s.elements * static_cast<std::int64_t>(sizeof(float)), s.seconds};
}

Model::~Model() = default;

void Model::trace_forward(Graph& g, Pass& pass, bool training, const Traced& r) const {
  pass.x = g.placeholder("x", DType::kF32, Shape::concat(-1, r.net.input_shape()));
  if (options_.loss.empty()) {
    pass.predictions = r.net.call(g, pass.x, training, r.device);
    return;
  }
  const TensorSpec target = loss_target_spec(options_.loss, Shape::concat(-1, r.net.output_shape()));
  pass.targets = g.placeholder("targets", target.dtype, target.shape);
  pass.predictions = r.net.call(g, pass.x, training, r.device);
  std::string why = check_loss_fits(g, options_.loss, pass.predictions);
  if (!why.empty()) throw SpecError(options_.config_file, "loss", why);
  Graph::Scope scope(g, "loss", r.device, Phase::kForward);
  LossOutputs loss = build_loss(g, options_.loss, pass.predictions, pass.targets);
  pass.loss = loss.mean;
  pass.per_example = loss.per_example;
  pass.scores = loss.scores;
}

void Model::trace_training(Graph& g, Pass& pass, const Traced& r) {
  trace_forward(g, pass, true, r);
  // A variable may be read more than once (shared weights); its gradient is the sum over its reads.
  std::vector<std::shared_ptr<Variable>> vars;
  std::vector<Output> reads;
  std::vector<std::size_t> owner;
  // Each variable's reads in node order, from one pass over the graph (a pass per variable made tracing
  // quadratic in the depth: 15 s for a spec of 10,000 small layers).
  std::unordered_map<const Variable*, std::vector<int>> reads_of;
  for (const Node& n : g.nodes())
    if (n.op == &ops::read_variable()) reads_of[n.vars[0].var.get()].push_back(n.id);
  for (const auto& v : r.net.variables()) {
    if (!v->trainable()) continue;
    if (const auto it = reads_of.find(v.get()); it != reads_of.end())
      for (const int id : it->second) {
        reads.push_back(Output{id, g.id()});
        owner.push_back(vars.size());
      }
    vars.push_back(v);
  }
  std::vector<Output> read_grads = gradients(g, pass.loss, reads);
  std::vector<std::vector<Output>> per_var(vars.size());
  for (std::size_t i = 0; i < reads.size(); ++i) per_var[owner[i]].push_back(read_grads[i]);
  std::vector<Output> grads;
  for (auto& list : per_var) grads.push_back(list.size() == 1 ? list[0] : g.add("AddN", list));
  // Gradients computed; next, updates applied. Whatever must happen between the two (an all-reduce across
  // replicas) happens here and nowhere else.
  if (r.member >= 0) {
    pass.weight = g.placeholder("replica_weight", DType::kF32, Shape{});
    grads = all_reduce_gradients(g, std::move(grads), pass, r.member);
  }
  if (options_.combine_gradients) {
    grads = options_.combine_gradients(g, vars, std::move(grads));
    TCTL_CHECK(grads.size() == vars.size(), "combine_gradients returned a gradient count other than the variables'");
  }
  pass.updates = r.optimizer.apply(g, vars, grads);
}

// Buckets from the last variable back, the order backpropagation finishes their gradients in, so the first
// bucket can be exchanged while earlier layers still compute. Each bucket is one AllReduce on the CPU (its
// gradients reach it through copy nodes from a device), after the bucket before it by a control edge: every
// replica issues them in one order, so they cannot wait on each other crosswise.
std::vector<Output> Model::all_reduce_gradients(Graph& g, std::vector<Output> grads, const Pass& pass,
                                                int member) const {
  Graph::Scope scope(g, "all_reduce", "cpu", Phase::kUpdate);
  const Output weight = pass.weight;
  std::vector<Output> out(grads.size());
  int previous = -1;
  std::int64_t instance = 0;
  for (std::size_t end = grads.size(); end > 0;) {
    std::size_t begin = end - 1;
    std::int64_t bytes = static_cast<std::int64_t>(g.spec(grads[begin]).shape.num_elements() * sizeof(float));
    while (begin > 0) {
      const std::int64_t next =
          static_cast<std::int64_t>(g.spec(grads[begin - 1]).shape.num_elements() * sizeof(float));
      if (bytes + next > options_.bucket_bytes) break;
      bytes += next;
      --begin;
    }
    std::vector<Output> inputs(grads.begin() + static_cast<std::ptrdiff_t>(begin),
                               grads.begin() + static_cast<std::ptrdiff_t>(end));
    inputs.push_back(weight);
    const Output packed =
        g.add("AllReduce", std::move(inputs),
              Attrs{{"group", collective_->id()}, {"member", std::int64_t{member}}, {"instance", instance++}});
    if (previous >= 0) g.add_control_input(packed.node, previous);
    previous = packed.node;
    std::int64_t at = 0;
    for (std::size_t i = begin; i < end; ++i) {
      const Shape shape = g.spec(grads[i]).shape;  // a copy: adding a node may move the graph's nodes
      out[i] =
          g.add("FlatSlice", {packed},
                Attrs{{"begin", at}, {"shape", std::vector<std::int64_t>(shape.dims().begin(), shape.dims().end())}});
      at += shape.num_elements();
    }
    end = begin;
  }
  return out;
}

Tensor Model::targets_for(const Dataset& data, std::span<const std::int64_t> rows) const {
  Tensor buffer;
  return targets_into(data, rows, buffer);
}

Tensor Model::targets_into(const Dataset& data, std::span<const std::int64_t> rows, Tensor& buffer) const {
  if (options_.loss == "categorical_crossentropy") return one_hot_rows(data.y, rows, net_->output_shape()[0], buffer);
  return gather_rows(data.y, rows, buffer);
}

std::pair<std::int64_t, std::int64_t> Model::local_rows(std::int64_t batch_rows) const {
  TCTL_CHECK(batch_rows >= 1, "local_rows of an empty batch");
  if (!multi_worker()) return {0, batch_rows};
  const std::int64_t begin = first_row_of_member(batch_rows, members_, first_member_);
  const std::int64_t end = first_row_of_member(batch_rows, members_, first_member_ + replicas());
  if (end > begin) return {begin, end - begin};
  return {std::min(begin, batch_rows - 1), 1};
}

std::vector<Tensor> Model::train_batch(const Tensor& x, const Tensor& targets, std::int64_t step,
                                       std::int64_t batch_rows) {
  if (collective_ || hogwild_ > 1) return mirrored_step(x, targets, step, nullptr, batch_rows);
  TCTL_CHECK(batch_rows == 0 || batch_rows == x.shape()[0], "a partial batch fed to a single replica");
  const Feed feeds[] = {{train_pass_->x, x}, {train_pass_->targets, targets}};
  const Output fetches[] = {train_pass_->loss, train_pass_->scores};
  RunOptions ro;
  ro.step = step;
  begin_hogwild_step();
  optimizer_.begin_step(step);
  std::vector<Tensor> out = train_session_->run(feeds, fetches, train_pass_->updates, ro);
  if (hogwild_ == 1) end_single_hogwild_step();
  return out;
}

void Model::begin_hogwild_step() {
  // The step counter before the first hogwild step (after any checkpoint was restored into it).
  if (hogwild_ > 0 && mirrored_steps_ == 0)
    hogwild_counter_start_ = optimizer_.state().back()->read().to(cpu_device()).item();
}

void Model::end_single_hogwild_step() {
  ++mirrored_steps_;
  ++hogwild_updates_;
}

std::vector<Tensor> Model::eval_batch(const Tensor& x, const Tensor& targets) {
  const Feed feeds[] = {{infer_pass_->x, x}, {infer_pass_->targets, targets}};
  const Output fetches[] = {infer_pass_->per_example, infer_pass_->scores};
  return infer_session_->run(feeds, fetches);
}

Tensor Model::predict(const Tensor& x, std::int64_t batch_size) {
  const std::int64_t n = x.shape()[0];
  Tensor out = Tensor::empty(DType::kF32, Shape::concat(n, net_->output_shape()));
  const std::size_t row_bytes = out.bytes() / static_cast<std::size_t>(std::max<std::int64_t>(n, 1));
  std::vector<std::int64_t> rows;
  Tensor buffer;
  std::vector<Output> fetches{infer_pass_->predictions};
  for (std::int64_t start = 0; start < n; start += batch_size) {
    rows.clear();
    for (std::int64_t i = start; i < std::min(n, start + batch_size); ++i) rows.push_back(i);
    std::vector<Feed> feeds{{infer_pass_->x, gather_rows(x, rows, buffer)}};
    std::vector<Tensor> r = infer_session_->run(feeds, fetches);
    std::memcpy(out.mutable_data<char>() + static_cast<std::size_t>(start) * row_bytes, r[0].raw_data(), r[0].bytes());
  }
  return out;
}

void Model::note_placement_warnings(const std::vector<std::string>& more) {
  for (const auto& w : more)
    if (std::find(placement_warnings_.begin(), placement_warnings_.end(), w) == placement_warnings_.end())
      placement_warnings_.push_back(w);
}

// Rows split evenly between the members (every replica of every worker), the first taking one more where they
// do not divide; a member left without rows (a last batch smaller than the members) runs the first row it was
// fed (the batch's first, or the one row local_rows gave a worker without rows) with weight 0, so it still
// meets the others in the all-reduce and adds nothing.
struct Model::Share {
  std::int64_t begin = 0, rows = 0;
  float weight = 0.0f;
  Tensor x, targets;
  std::vector<Tensor> out;
  std::exception_ptr error;
};

std::vector<Model::Share> Model::split_batch(const Tensor& x, const Tensor& targets, std::int64_t batch) {
  // x holds the whole batch, or this process's rows of it (local_rows), which start at `offset`.
  const auto [offset, local] =
      x.shape()[0] == batch ? std::pair<std::int64_t, std::int64_t>{0, batch} : local_rows(batch);
  TCTL_CHECK(x.shape()[0] == local, "a mirrored step fed rows other than local_rows");
  const int n = members_;
  std::vector<Share> shares(static_cast<std::size_t>(n));
  for (int m = 0; m < n; ++m) {
    Share& s = shares[static_cast<std::size_t>(m)];
    s.begin = first_row_of_member(batch, n, m);
    s.rows = first_row_of_member(batch, n, m + 1) - s.begin;
    s.weight = static_cast<float>(static_cast<double>(s.rows) / static_cast<double>(batch));
  }
  while (static_cast<std::int64_t>(row_numbers_.size()) < batch)
    row_numbers_.push_back(static_cast<std::int64_t>(row_numbers_.size()));
  const std::span<const std::int64_t> fed_rows =
      std::span<const std::int64_t>(row_numbers_).first(static_cast<std::size_t>(local));
  // Hogwild's workers are threads of one replica: each runs its rows through the one session.
  const int runs = hogwild_ > 1 ? hogwild_ : replicas();
  share_buffers_.resize(static_cast<std::size_t>(runs));
  for (int r = 0; r < runs; ++r) {
    // This process's replicas are members first_member_ .. first_member_ + replicas() - 1.
    Share& s = shares[static_cast<std::size_t>(first_member_ + r)];
    const std::span<const std::int64_t> rows =
        s.rows > 0 ? fed_rows.subspan(static_cast<std::size_t>(s.begin - offset), static_cast<std::size_t>(s.rows))
                   : fed_rows.first(1);
    auto& [bx, bt] = share_buffers_[static_cast<std::size_t>(r)];
    s.x = gather_rows(x, rows, bx);
    s.targets = gather_rows(targets, rows, bt);
  }
  return shares;
}

void Model::run_replicas(std::vector<Share>& shares, std::int64_t step, Profiler* profiler) {
  auto share_of = [&](int r) -> Share& { return shares[static_cast<std::size_t>(first_member_ + r)]; };
  begin_hogwild_step();
  optimizer_.begin_step(step);
  for (const auto& rep : others_) {
    if (rep->optimizer.lr_factor() != optimizer_.lr_factor()) rep->optimizer.set_lr_factor(optimizer_.lr_factor());
    rep->optimizer.begin_step(step);
  }
  // The first replica to fail aborts the group, so the others stop waiting for it in an all-reduce; its
  // error is the one reported, the others' ("the group was aborted") follow from it.
  std::atomic<int> first_failure{-1};
  auto run_replica = [&](int r) {
    Share& s = share_of(r);
    const bool own = r == 0 || hogwild_ > 1;
    Session& session = own ? *train_session_ : *others_[static_cast<std::size_t>(r - 1)]->session;
    const Pass& pass = own ? *train_pass_ : others_[static_cast<std::size_t>(r - 1)]->pass;
    std::vector<Feed> feeds{{pass.x, s.x}, {pass.targets, s.targets}};
    if (pass.weight.valid()) feeds.push_back({pass.weight, Tensor::scalar(s.weight)});
    const Output fetches[] = {pass.loss, pass.scores};
    RunOptions ro;
    ro.step = step;
    ro.batch_offset = s.rows > 0 ? s.begin : 0;
    ro.profiler = r == 0 ? profiler : nullptr;
    try {
      s.out = session.run(feeds, fetches, pass.updates, ro);
    } catch (const std::exception& e) {
      s.error = std::current_exception();
      int none = -1;
      if (first_failure.compare_exchange_strong(none, r) && collective_)
        collective_->abort("replica " + std::to_string(first_member_ + r) + " failed: " + e.what());
    }
  };
  if (threads_) {
    threads_->run(run_replica);
  } else {
    run_replica(0);
  }
  if (const int failed = first_failure.load(); failed >= 0) {
    if (group_) {
      // Every replica has returned: nobody is inside the group, which can start over for a next step. The
      // replicas may have stopped after different updates (an update refusing a NaN stops its run, and the
      // others' order depends on their threads): the first one's state goes to all, so they agree again.
      group_->recover();
      sync_replicas();
    }
    std::rethrow_exception(share_of(failed).error);
  }
}

// The step's loss (the members' mean losses weighted by their rows) and metric scores (theirs in row order),
// computed alike in-process and across workers, where they come from an all-reduce of each member's rows,
// zeros elsewhere, and its loss times its rows.
std::vector<Tensor> Model::step_results(const std::vector<Share>& shares, std::int64_t batch, std::int64_t step,
                                        bool stop_vote) {
  const Share& first = shares[static_cast<std::size_t>(first_member_)];
  const Tensor& p0 = first.out[1];
  const Shape shape = Shape::concat(batch, p0.shape().without_batch());
  if (!scores_.defined() || scores_.shape() != shape || !scores_.unique()) scores_ = Tensor::empty(DType::kF32, shape);
  const std::int64_t width = p0.num_elements() / p0.shape()[0];
  auto loss_term = [](const Share& s) { return s.rows > 0 ? s.out[0].item() * static_cast<float>(s.rows) : 0.0f; };
  float total = 0.0f;
  if (multi_worker()) {
    // After the rows' scores: the loss term, and this rank's vote to stop (the sum says whether any voted).
    std::vector<float> results(static_cast<std::size_t>(batch * width + 2), 0.0f);
    if (first.rows > 0)
      std::memcpy(results.data() + first.begin * width, first.out[1].data<float>(), first.out[1].bytes());
    float& loss = results[static_cast<std::size_t>(batch * width)];
    float& stop_votes = results.back();
    loss = loss_term(first);
    stop_votes = stop_vote ? 1.0f : 0.0f;
    collective_->all_reduce(first_member_, collective_key(step, kResultsInstance), results.data(),
                            static_cast<std::int64_t>(results.size()), 1.0f, results.data(),
                            "the results at step " + std::to_string(step));
    std::memcpy(scores_.mutable_data<float>(), results.data(), scores_.bytes());
    total = loss;
    stop_agreed_ = stop_agreed_ || stop_votes > 0.0f;
  } else {
    for (const Share& s : shares) {
      total += loss_term(s);
      if (s.rows > 0)
        std::memcpy(scores_.mutable_data<float>() + s.begin * width, s.out[1].data<float>(), s.out[1].bytes());
    }
  }
  return {Tensor::scalar(total / static_cast<float>(batch)), scores_};
}

std::vector<Tensor> Model::mirrored_step(const Tensor& x, const Tensor& targets, std::int64_t step, Profiler* profiler,
                                         std::int64_t batch_rows) {
  const bool stop_vote = stop_flag_ != nullptr && stop_flag_->load(std::memory_order_relaxed);
  const std::int64_t batch = batch_rows > 0 ? batch_rows : x.shape()[0];
  TCTL_CHECK(batch >= 1 && targets.shape()[0] == x.shape()[0], "a mirrored step needs a batch of one row or more");
  std::vector<Share> shares = split_batch(x, targets, batch);
  run_replicas(shares, step, profiler);
  ++mirrored_steps_;
  if (hogwild_ > 1) hogwild_updates_ += hogwild_;
  if (collective_)
    average_moving_statistics(step, [&](int member) { return shares[static_cast<std::size_t>(member)].weight; });
  return step_results(shares, batch, step, stop_vote);
}

// Variables a step writes without a gradient (BatchNormalization's moving statistics) moved apart, each
// replica with its own rows' statistics: each becomes the members' values weighted by their rows, as
// TensorFlow's mirrored variables aggregate such writes (the mean of the replicas' updates), and is written
// back to all, so the replicas stay identical. In-process the sum is formed here, across workers by an
// all-reduce; both add the same float products in member order.
void Model::average_moving_statistics(std::int64_t step, const std::function<float(int)>& weight) {
  std::vector<std::size_t> indices;
  const auto& vars = net_->variables();
  for (std::size_t i = 0; i < vars.size(); ++i)
    if (!vars[i]->trainable()) indices.push_back(i);
  if (indices.empty()) return;
  auto local = [&](int r) {
    std::vector<std::shared_ptr<Variable>> out;
    for (std::size_t i : indices) out.push_back(replica_net(r).variables()[i]);
    return out;
  };
  std::vector<float> mean;
  if (options_.workers) {
    mean = packed_values(local(0));
    collective_->all_reduce(first_member_, collective_key(step, kStatisticsInstance), mean.data(),
                            static_cast<std::int64_t>(mean.size()), weight(first_member_), mean.data(),
                            "the moving statistics at step " + std::to_string(step));
  } else {
    for (int r = 0; r < replicas(); ++r) {
      const std::vector<float> v = packed_values(local(r));
      const float w = weight(r);
      if (r == 0) mean.assign(v.size(), 0.0f);
      for (std::size_t k = 0; k < v.size(); ++k) mean[k] = r == 0 ? w * v[k] : mean[k] + w * v[k];
    }
  }
  for (int r = 0; r < replicas(); ++r) assign_packed(local(r), mean);
}

float Model::train_step(const Tensor& x, const Tensor& targets, std::int64_t step, Profiler* profiler) {
  if (collective_ || hogwild_ > 1) return mirrored_step(x, targets, step, profiler)[0].item();
  std::vector<Feed> feeds{{train_pass_->x, x}, {train_pass_->targets, targets}};
  std::vector<Output> fetches{train_pass_->loss};
  RunOptions ro;
  ro.step = step;
  ro.profiler = profiler;
  begin_hogwild_step();
  optimizer_.begin_step(step);
  const float loss = train_session_->run(feeds, fetches, train_pass_->updates, ro)[0].item();
  if (hogwild_ == 1) end_single_hogwild_step();
  return loss;
}

float Model::eager_train_step(const Tensor& x, const Tensor& targets, std::int64_t step, Profiler* profiler) {
  optimizer_.begin_step(step);
  return eager_training(x, targets, EagerOptions{options_.seed, step, profiler});
}

float Model::eager_training(const Tensor& x, const Tensor& targets, const EagerOptions& options) {
  Graph g;
  EagerRunner eager(g, intra_pool_, options);
  eager.feed("x", x);
  eager.feed("targets", targets);
  Pass pass;
  trace_training(g, pass, first_replica(-1));
  return eager.value(pass.loss).item();
}

Tensor Model::eager_forward_step(const Tensor& x, Profiler* profiler) {
  Graph g;
  EagerRunner eager(g, intra_pool_, EagerOptions{options_.seed, 0, profiler});
  eager.feed("x", x);
  // The loss is traced too (as in the inference graph) but its targets are not part of the timing.
  if (!options_.loss.empty()) {
    const TensorSpec target = loss_target_spec(options_.loss, Shape::concat(x.shape()[0], net_->output_shape()));
    eager.feed("targets", Tensor::zeros(target.dtype, target.shape));
  }
  Pass pass;
  trace_forward(g, pass, false, first_replica(-1));
  return eager.value(pass.predictions);
}

std::string Model::find_non_finite(const Tensor& x, const Tensor& targets, std::int64_t step) {
  EagerOptions eo{options_.seed, step, nullptr};
  eo.find_non_finite = true;
  try {
    eager_training(x, targets, eo);
  } catch (const NonFiniteValue& e) {
    return e.what();
  }
  return "replaying the step found no op that made a NaN or an infinity";
}

Tensor Model::forward_step(const Tensor& x, Profiler* profiler) {
  const Feed feeds[] = {{infer_pass_->x, x}};
  const Output fetches[] = {infer_pass_->predictions};
  RunOptions ro;
  ro.profiler = profiler;
  return std::move(infer_session_->run(feeds, fetches, {}, ro)[0]);
}

}  // namespace tctl
