#include "models/train/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
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

struct Model::Traced {
  const Sequential& net;
  Optimizer& optimizer;
  const std::string& device;
  int member = -1;  // the replica's member of the all-reduce group; -1: no all-reduce (one replica, eager)
};

namespace {

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
      intra_pool_(threads_per_replica(options_.intra_op_threads, nets.size())),
      strategy_(make_distribution_strategy(options_, nets.size())) {
  const bool inference_only = options_.loss.empty();
  TCTL_CHECK(!inference_only ||
                 (nets.size() == 1 && !options_.workers && options_.hogwild_workers <= 1 && options_.metrics.empty()),
             "a model without a loss is one replica without metrics");
  check_metrics(options_);
  if (options_.replica_devices.size() > 1) options_.device = options_.replica_devices[0];

  if (!inference_only) {
    // Where each node runs is settled now, before a caller writes anything, not at the first step: a device
    // strict placement refuses throws here, and the nodes soft placement moves to the CPU are known up front.
    train_ = trace_replica(*net_, optimizer_, options_.device, strategy_->collective() ? strategy_->first_member() : -1,
                           inter_pool_, intra_pool_);
  }
  inference_ = std::make_unique<Inference>(net_, options_, inter_pool_, intra_pool_);
  note_placement_warnings(inference_->placement_warnings());

  nets.erase(nets.begin());
  strategy_->start(
      ReplicaHandle{net_.get(), &optimizer_, &train_},
      [this](const Sequential& net, Optimizer& optimizer, const std::string& device, int member, ThreadPool& inter,
             ThreadPool& intra) { return trace_replica(net, optimizer, device, member, inter, intra); },
      std::move(nets));
  if (train_.graph != nullptr && strategy_->feeds_whole_batch())
    input_device_ = device_using(*train_.graph, train_.pass.x, train_.pass.targets, options_.placement);
  sync_replicas();
}

SessionOptions Model::session_options() const {
  SessionOptions so;
  so.seed = options_.seed;
  so.placement = options_.placement;
  so.device_graphs = options_.device_graphs;
  so.compute_type = options_.compute_type;
  return so;
}

TracedStep Model::trace_replica(const Sequential& net, Optimizer& optimizer, const std::string& device, int member,
                                ThreadPool& inter, ThreadPool& intra) {
  TracedStep traced;
  traced.graph = std::make_shared<Graph>();
  trace_training(*traced.graph, traced.pass, Traced{net, optimizer, device, member});
  if (options_.auto_control_dependencies) add_auto_control_dependencies(*traced.graph);
  std::vector<Output> fed{traced.pass.x, traced.pass.targets};
  if (traced.pass.weight.valid()) fed.push_back(traced.pass.weight);
  note_placement_warnings(place_all(*traced.graph, fed, options_.placement).warnings);
  traced.session = std::make_unique<Session>(traced.graph, inter, intra, session_options());
  return traced;
}

Model::Traced Model::first_replica(int member) { return Traced{*net_, optimizer_, options_.device, member}; }

Model::~Model() = default;

std::int64_t class_weight_count(const std::string& loss, const Shape& output) {
  if (output.rank() != 2) return 0;
  if (loss == "sparse_categorical_crossentropy" || loss == "categorical_crossentropy") return output[1];
  if (loss == "binary_crossentropy" && output[1] == 1) return 2;
  return 0;
}

void Model::weigh_classes(Graph& g, TracedPass& pass, const Traced& r) {
  std::shared_ptr<Variable>& weights = class_weights_[&r.net];
  if (!weights) {
    const auto n = static_cast<std::int64_t>(options_.class_weights.size());
    TCTL_CHECK(n == class_weight_count(options_.loss, Shape::concat(-1, r.net.output_shape())),
               "class weights of another count than the model's classes");
    weights = std::make_shared<Variable>("loss/class_weight", Tensor::from_floats(Shape{n}, options_.class_weights),
                                         LockingMode::kMutex, false);
  }
  Graph::Scope scope(g, "loss", r.device, Phase::kForward);
  const Output row_weights = g.add("ClassWeight", {pass.targets, g.read(weights)});
  pass.loss = g.add("Mean", {g.add("Mul", {pass.per_example, row_weights})});
}

void Model::set_class_weights(std::span<const float> weights) {
  TCTL_CHECK(weights.size() == options_.class_weights.size(), "class weights of another count than the model's");
  const Tensor value = Tensor::from_floats(Shape{static_cast<std::int64_t>(weights.size())}, weights);
  for (const auto& [net, variable] : class_weights_) variable->assign(value);
}

void Model::trace_training(Graph& g, TracedPass& pass, const Traced& r) {
  trace_forward(g, pass, r.net, true, r.device, options_);
  if (!options_.class_weights.empty()) weigh_classes(g, pass, r);
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
  std::vector<Output> read_grads = gradients(g, r.optimizer.scale_loss(g, pass.loss), reads);
  std::vector<std::vector<Output>> per_var(vars.size());
  for (std::size_t i = 0; i < reads.size(); ++i) per_var[owner[i]].push_back(read_grads[i]);
  std::vector<Output> grads;
  for (auto& list : per_var) grads.push_back(list.size() == 1 ? list[0] : g.add("AddN", list));
  // Gradients computed; next, updates applied. Whatever must happen between the two (an all-reduce across
  // replicas) happens here and nowhere else.
  if (r.member >= 0) {
    pass.weight = g.placeholder("replica_weight", DType::kF32, Shape{});
    grads = all_reduce_gradients(g, std::move(grads), pass, r);
  }
  if (options_.combine_gradients) {
    grads = options_.combine_gradients(g, vars, std::move(grads));
    TCTL_CHECK(grads.size() == vars.size(), "combine_gradients returned a gradient count other than the variables'");
  }
  UpdateOps ops = r.optimizer.apply(g, vars, grads);
  pass.updates = std::move(ops.apply);
  pass.accumulates = std::move(ops.accumulate);
}

// Buckets from the last variable back, the order backpropagation finishes their gradients in, so the first
// bucket can be exchanged while earlier layers still compute. Each bucket is one AllReduce, after the bucket
// before it by a control edge: every replica issues them in one order, so they cannot wait on each other
// crosswise. It runs on the replica's device where that device's own all-reduce carries the collective (NCCL
// on CUDA: the gradients never leave the GPU; join_collective_on), else on the CPU, the gradients reaching it
// through copy nodes.
std::vector<Output> Model::all_reduce_gradients(Graph& g, std::vector<Output> grads, const TracedPass& pass,
                                                const Traced& r) {
  std::string why;
  const std::string device = join_collective_on(r.device, strategy_->collective(), r.member, &why);
  if (!why.empty()) note_placement_warnings({why});
  Graph::Scope scope(g, "all_reduce", device, Phase::kUpdate);
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
    const Output packed = g.add(
        "AllReduce", std::move(inputs),
        Attrs{{"group", strategy_->collective()->id()}, {"member", std::int64_t{r.member}}, {"instance", instance++}});
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

std::vector<Tensor> Model::train_batch(const Tensor& x, const Tensor& targets, std::int64_t step,
                                       std::int64_t batch_rows, const AccumulationStep& accumulation) {
  return strategy_->step(StepRequest{x, targets, step, batch_rows, nullptr, true, accumulation});
}

void Model::note_placement_warnings(const std::vector<std::string>& more) {
  for (const auto& w : more)
    if (std::find(placement_warnings_.begin(), placement_warnings_.end(), w) == placement_warnings_.end())
      placement_warnings_.push_back(w);
}

float Model::train_step(const Tensor& x, const Tensor& targets, std::int64_t step, Profiler* profiler) {
  return strategy_->step(StepRequest{x, targets, step, 0, profiler, false})[0].item();
}

float Model::eager_train_step(const Tensor& x, const Tensor& targets, std::int64_t step, Profiler* profiler) {
  optimizer_.begin_step(step);
  return eager_training(x, targets, EagerOptions{options_.seed, step, profiler, options_.compute_type});
}

float Model::eager_training(const Tensor& x, const Tensor& targets, const EagerOptions& options) {
  Graph g;
  EagerRunner eager(g, intra_pool_, options);
  eager.feed("x", x);
  eager.feed("targets", targets);
  TracedPass pass;
  trace_training(g, pass, first_replica(-1));
  return eager.value(pass.loss).item();
}

Tensor Model::eager_forward_step(const Tensor& x, Profiler* profiler) {
  Graph g;
  EagerRunner eager(g, intra_pool_, EagerOptions{options_.seed, 0, profiler, options_.compute_type});
  eager.feed("x", x);
  // The loss is traced too (as in the inference graph) but its targets are not part of the timing.
  if (!options_.loss.empty()) {
    const TensorSpec target = loss_target_spec(options_.loss, Shape::concat(x.shape()[0], net_->output_shape()));
    eager.feed("targets", Tensor::zeros(target.dtype, target.shape));
  }
  TracedPass pass;
  trace_forward(g, pass, *net_, false, options_.device, options_);
  return eager.value(pass.predictions);
}

bool Model::averages_stand_in() const {
  if (!options_.optimizer.use_ema || averages_final_ || optimizer_.averages().empty()) return false;
  // Before the first update the averages are not yet set (the update starts them at the weight).
  return optimizer_.iterations() > 0.0;
}

std::vector<NamedTensor> Model::kept_weights() const {
  std::vector<NamedTensor> out = variable_values(net_->variables());
  if (!averages_stand_in()) return out;
  for (NamedTensor& t : out)
    for (const auto& [var, average] : optimizer_.averages())
      if (var->name() == t.name) t.value = average->read();
  return out;
}

void Model::swap_averages() {
  if (!averages_stand_in()) return;
  for (const auto& [var, average] : optimizer_.averages()) {
    const Tensor weight = var->read();
    var->assign(average->read());
    average->assign(weight);
  }
}

void Model::finalize_averages() {
  if (!averages_stand_in()) return;
  for (const auto& [var, average] : optimizer_.averages()) var->assign(average->read());
  averages_final_ = true;
}

std::string Model::find_non_finite(const Tensor& x, const Tensor& targets, std::int64_t step) {
  EagerOptions eo{options_.seed, step, nullptr, options_.compute_type};
  eo.find_non_finite = true;
  try {
    eager_training(x, targets, eo);
  } catch (const NonFiniteValue& e) {
    return e.what();
  }
  return "replaying the step found no op that made a NaN or an infinity";
}

}  // namespace tctl
