#include "models/train/model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/autodiff.h"
#include "core/device.h"
#include "core/eager.h"
#include "core/errors.h"
#include "core/ops/state.h"
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
  Output loss;         // scalar mean
  Output per_example;  // [batch]
  std::vector<Output> updates;
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

}  // namespace

Model::Model(std::shared_ptr<Sequential> net, ModelOptions options)
    : net_(std::move(net)),
      options_(std::move(options)),
      optimizer_(options_.optimizer),
      inter_pool_(options_.inter_op_threads),
      intra_pool_(options_.intra_op_threads) {
  check_metrics(options_);
  set_allow_tf32(options_.allow_tf32);

  train_graph_ = std::make_shared<Graph>();
  train_pass_ = std::make_unique<Pass>();
  trace_training(*train_graph_, *train_pass_);
  if (options_.auto_control_dependencies) add_auto_control_dependencies(*train_graph_);
  infer_graph_ = std::make_shared<Graph>();
  infer_pass_ = std::make_unique<Pass>();
  trace_forward(*infer_graph_, *infer_pass_, false);

  // A device strict placement refuses is found now, before a caller writes anything, not at the first step.
  if (options_.placement.strict)
    for (const auto& [graph, pass] :
         {std::pair{train_graph_.get(), train_pass_.get()}, std::pair{infer_graph_.get(), infer_pass_.get()}}) {
      const Output fed[] = {pass->x, pass->targets};
      place_all(*graph, fed, options_.placement);
    }
  SessionOptions so;
  so.seed = options_.seed;
  so.placement = options_.placement;
  train_session_ = std::make_unique<Session>(train_graph_, inter_pool_, intra_pool_, so);
  infer_session_ = std::make_unique<Session>(infer_graph_, inter_pool_, intra_pool_, so);
}

Model::~Model() = default;

void Model::trace_forward(Graph& g, Pass& pass, bool training) const {
  const TensorSpec target = loss_target_spec(options_.loss, Shape::concat(-1, net_->output_shape()));
  pass.x = g.placeholder("x", DType::kF32, Shape::concat(-1, net_->input_shape()));
  pass.targets = g.placeholder("targets", target.dtype, target.shape);
  pass.predictions = net_->call(g, pass.x, training, options_.device);
  std::string why = check_loss_fits(g, options_.loss, pass.predictions);
  if (!why.empty()) throw SpecError(options_.config_file, "loss", why);
  Graph::Scope scope(g, "loss", options_.device, Phase::kForward);
  LossOutputs loss = build_loss(g, options_.loss, pass.predictions, pass.targets);
  pass.loss = loss.mean;
  pass.per_example = loss.per_example;
}

void Model::trace_training(Graph& g, Pass& pass) {
  trace_forward(g, pass, true);
  // A variable may be read more than once (shared weights); its gradient is the sum over its reads.
  std::vector<std::shared_ptr<Variable>> vars;
  std::vector<Output> reads;
  std::vector<std::size_t> owner;
  for (const auto& v : net_->variables()) {
    if (!v->trainable()) continue;
    for (const Node& n : g.nodes()) {
      if (n.op != &ops::read_variable() || n.vars[0].var != v) continue;
      reads.push_back(Output{n.id, g.id()});
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
  if (options_.combine_gradients) {
    grads = options_.combine_gradients(g, vars, std::move(grads));
    TCTL_CHECK(grads.size() == vars.size(), "combine_gradients returned a gradient count other than the variables'");
  }
  pass.updates = optimizer_.apply(g, vars, grads);
}

Tensor Model::targets_for(const Dataset& data, std::span<const std::int64_t> rows) const {
  Tensor buffer;
  return targets_into(data, rows, buffer);
}

Tensor Model::targets_into(const Dataset& data, std::span<const std::int64_t> rows, Tensor& buffer) const {
  if (options_.loss == "categorical_crossentropy") return one_hot_rows(data.y, rows, net_->output_shape()[0], buffer);
  return gather_rows(data.y, rows, buffer);
}

std::vector<Tensor> Model::train_batch(const Tensor& x, const Tensor& targets, std::int64_t step) {
  const Feed feeds[] = {{train_pass_->x, x}, {train_pass_->targets, targets}};
  const Output fetches[] = {train_pass_->loss, train_pass_->predictions};
  RunOptions ro;
  ro.step = step;
  optimizer_.begin_step(step);
  return train_session_->run(feeds, fetches, train_pass_->updates, ro);
}

std::vector<Tensor> Model::eval_batch(const Tensor& x, const Tensor& targets) {
  const Feed feeds[] = {{infer_pass_->x, x}, {infer_pass_->targets, targets}};
  const Output fetches[] = {infer_pass_->per_example, infer_pass_->predictions};
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

std::vector<std::string> Model::placement_warnings() const {
  std::vector<std::string> out = train_session_->placement_warnings();
  for (auto& w : infer_session_->placement_warnings())
    if (std::find(out.begin(), out.end(), w) == out.end()) out.push_back(std::move(w));
  return out;
}

float Model::train_step(const Tensor& x, const Tensor& targets, std::int64_t step, Profiler* profiler) {
  std::vector<Feed> feeds{{train_pass_->x, x}, {train_pass_->targets, targets}};
  std::vector<Output> fetches{train_pass_->loss};
  RunOptions ro;
  ro.step = step;
  ro.profiler = profiler;
  optimizer_.begin_step(step);
  return train_session_->run(feeds, fetches, train_pass_->updates, ro)[0].item();
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
  trace_training(g, pass);
  return eager.value(pass.loss).item();
}

Tensor Model::eager_forward_step(const Tensor& x, Profiler* profiler) {
  Graph g;
  EagerRunner eager(g, intra_pool_, EagerOptions{options_.seed, 0, profiler});
  eager.feed("x", x);
  // The loss is traced too (as in the inference graph) but its targets are not part of the timing.
  const TensorSpec target = loss_target_spec(options_.loss, Shape::concat(x.shape()[0], net_->output_shape()));
  eager.feed("targets", Tensor::zeros(target.dtype, target.shape));
  Pass pass;
  trace_forward(g, pass, false);
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
