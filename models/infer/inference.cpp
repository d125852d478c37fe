#include "models/infer/inference.h"

#include "models/data/row_stream.h"

#include <algorithm>
#include <cstring>

#include "core/device.h"
#include "core/errors.h"
#include "core/text.h"
#include "models/nn/losses.h"

namespace tctl {

void check_metrics(const InferenceOptions& o) {
  for (std::size_t i = 0; i < o.metrics.size(); ++i) {
    const std::string& m = o.metrics[i];
    const auto& known = loss_metrics(o.loss);
    if (std::find(known.begin(), known.end(), m) == known.end()) {
      throw SpecError(o.config_file, "metrics[" + std::to_string(i) + "]",
                      "metric \"" + m + "\" does not apply to loss " + o.loss + " (known: " + join(known) + ")");
    }
  }
}

void trace_forward(Graph& g, TracedPass& pass, const Sequential& net, bool training, const std::string& device,
                   const InferenceOptions& options) {
  pass.x = g.placeholder("x", DType::kF32, Shape::concat(-1, net.input_shape()));
  if (options.loss.empty()) {
    pass.predictions = net.call(g, pass.x, training, device);
    return;
  }
  const TensorSpec target = loss_target_spec(options.loss, Shape::concat(-1, net.output_shape()));
  pass.targets = g.placeholder("targets", target.dtype, target.shape);
  pass.predictions = net.call(g, pass.x, training, device);
  std::string why = check_loss_fits(g, options.loss, pass.predictions);
  if (!why.empty()) throw SpecError(options.config_file, "loss", why);
  Graph::Scope scope(g, "loss", device, Phase::kForward);
  LossOutputs loss = build_loss(g, options.loss, pass.predictions, pass.targets);
  pass.loss = loss.mean;
  pass.per_example = loss.per_example;
  pass.scores = loss.scores;
}

Inference::Inference(std::shared_ptr<const Sequential> net, InferenceOptions options, ThreadPool& inter,
                     ThreadPool& intra)
    : net_(std::move(net)), options_(std::move(options)) {
  build(inter, intra);
}

Inference::Inference(std::shared_ptr<const Sequential> net, InferenceOptions options, int inter_op_threads,
                     int intra_op_threads)
    : Inference(std::move(net), std::move(options), std::make_unique<ThreadPool>(inter_op_threads),
                std::make_unique<ThreadPool>(intra_op_threads)) {}

Inference::Inference(std::shared_ptr<const Sequential> net, InferenceOptions options, std::unique_ptr<ThreadPool> inter,
                     std::unique_ptr<ThreadPool> intra)
    : net_(std::move(net)), options_(std::move(options)), own_inter_(std::move(inter)), own_intra_(std::move(intra)) {
  build(*own_inter_, *own_intra_);
}

Inference::~Inference() = default;

void Inference::build(ThreadPool& inter, ThreadPool& intra) {
  check_metrics(options_);
  backend_flag("allow_tf32").store(options_.allow_tf32, std::memory_order_relaxed);
  graph_ = std::make_shared<Graph>();
  trace_forward(*graph_, pass_, *net_, false, options_.device, options_);
  // Where each node runs is settled now, not at the first batch: a device strict placement refuses throws
  // here, and the nodes soft placement moves to the CPU are known up front.
  std::vector<Output> fed{pass_.x};
  if (!options_.loss.empty()) fed.push_back(pass_.targets);
  placement_warnings_ = place_all(*graph_, fed, options_.placement).warnings;
  SessionOptions so;
  so.seed = options_.seed;
  so.placement = options_.placement;
  so.device_graphs = options_.device_graphs;
  so.compute_type = options_.compute_type;
  session_ = std::make_unique<Session>(graph_, inter, intra, so);
}

std::vector<Tensor> Inference::eval_batch(const Tensor& x, const Tensor& targets) {
  const Feed feeds[] = {{pass_.x, x}, {pass_.targets, targets}};
  const Output fetches[] = {pass_.per_example, pass_.scores};
  return session_->run(feeds, fetches);
}

Tensor Inference::predict(const Tensor& x, std::int64_t batch_size) {
  const std::int64_t n = x.shape()[0];
  Tensor out = Tensor::empty(DType::kF32, Shape::concat(n, net_->output_shape()));
  const std::size_t row_bytes = out.bytes() / static_cast<std::size_t>(std::max<std::int64_t>(n, 1));
  std::vector<std::int64_t> rows;
  Tensor buffer;
  std::vector<Output> fetches{pass_.predictions};
  for (std::int64_t start = 0; start < n; start += batch_size) {
    rows.clear();
    for (std::int64_t i = start; i < std::min(n, start + batch_size); ++i) rows.push_back(i);
    std::vector<Feed> feeds{{pass_.x, gather_rows(x, rows, buffer)}};
    std::vector<Tensor> r = session_->run(feeds, fetches);
    std::memcpy(out.mutable_data<char>() + static_cast<std::size_t>(start) * row_bytes, r[0].raw_data(), r[0].bytes());
  }
  return out;
}

Tensor Inference::forward_step(const Tensor& x, Profiler* profiler) {
  const Feed feeds[] = {{pass_.x, x}};
  const Output fetches[] = {pass_.predictions};
  RunOptions ro;
  ro.profiler = profiler;
  return std::move(session_->run(feeds, fetches, {}, ro)[0]);
}

Tensor Inference::targets_into(const Dataset& data, std::span<const std::int64_t> rows, Tensor& buffer) const {
  if (options_.loss == "categorical_crossentropy") return one_hot_rows(data.y, rows, net_->output_shape()[0], buffer);
  return gather_rows(data.y, rows, buffer);
}

MetricValues Inference::evaluate(const Dataset& data, std::int64_t batch_size) {
  BatchSums totals;
  for_each_window(data, [&](const Dataset& window) { totals += evaluate_sums(window, batch_size); });
  return averages(totals, options_.metrics);
}

BatchSums Inference::evaluate_sums(const Dataset& data, std::int64_t batch_size) {
  const std::int64_t n = data.size();
  BatchSums totals;
  std::vector<std::int64_t> rows;
  Tensor x_buffer, y_buffer;
  for (std::int64_t start = 0; start < n; start += batch_size) {
    rows.clear();
    for (std::int64_t i = start; i < std::min(n, start + batch_size); ++i) rows.push_back(i);
    const std::vector<Tensor> out = eval_batch(gather_rows(data.x, rows, x_buffer), targets_into(data, rows, y_buffer));
    BatchSums sums;
    const float* losses = out[0].data<float>();
    for (std::size_t i = 0; i < rows.size(); ++i) sums.loss += losses[i];
    add_metric_sums(out[1], data, rows, options_.loss, sums);
    totals += sums;
  }
  return totals;
}

}  // namespace tctl
