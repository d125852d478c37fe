#include "models/model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "core/autodiff.h"
#include "core/eager.h"
#include "core/errors.h"
#include "core/ops/state.h"
#include "core/fifo_queue.h"

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
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      throw SpecError(o.config_file, "metrics[" + std::to_string(i) + "]",
                      "metric \"" + m + "\" does not apply to loss " + o.loss + " (known: " + list + ")");
    }
  }
}

// Copies rows of a [N, ...] tensor into a batch tensor, reusing `buffer` when nobody else holds it.
Tensor gather_rows(const Tensor& src, std::span<const std::int64_t> rows, Tensor& buffer) {
  Shape shape = src.shape().with_batch(static_cast<std::int64_t>(rows.size()));
  if (!buffer.unique() || !(buffer.shape() == shape) || buffer.dtype() != src.dtype())
    buffer = Tensor::empty(src.dtype(), shape);
  const std::size_t row_bytes = src.bytes() / static_cast<std::size_t>(std::max<std::int64_t>(src.shape()[0], 1));
  const char* from = static_cast<const char*>(src.raw_data());
  char* to = buffer.mutable_data<char>();
  for (std::size_t i = 0; i < rows.size(); ++i)
    std::memcpy(to + i * row_bytes, from + static_cast<std::size_t>(rows[i]) * row_bytes, row_bytes);
  return buffer;
}

// One-hot rows of int32 labels into a [rows, classes] batch tensor, reusing `buffer` like gather_rows, so
// categorical cross-entropy steps allocate nothing either. A label outside [0, classes) gives a zero row.
Tensor one_hot_rows(const Tensor& labels, std::span<const std::int64_t> rows, std::int64_t classes, Tensor& buffer) {
  const Shape shape{static_cast<std::int64_t>(rows.size()), classes};
  if (!buffer.unique() || !(buffer.shape() == shape) || buffer.dtype() != DType::kF32)
    buffer = Tensor::empty(DType::kF32, shape);
  float* out = buffer.mutable_data<float>();
  std::fill(out, out + shape.num_elements(), 0.0f);
  const std::int32_t* y = labels.data<std::int32_t>();
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::int32_t label = y[rows[i]];
    if (label >= 0 && label < classes) out[static_cast<std::int64_t>(i) * classes + label] = 1.0f;
  }
  return buffer;
}

// One batch of feeds on its way from the producer to the training loop.
struct Batch {
  Tensor x;
  Tensor y;
  std::int64_t step = -1;
};

// The epoch's sums are kept as plain values because an interrupted epoch's go into the checkpoint.
MetricValues averages(const BatchSums& sums, const std::vector<std::string>& metrics) {
  MetricAccumulator accumulator;
  accumulator.add(sums);
  return accumulator.averages(metrics);
}

std::int64_t argmax_row(const float* p, std::int64_t n) {
  return std::max_element(p, p + n) - p;
}

}  // namespace

Model::Model(std::shared_ptr<Sequential> net, ModelOptions options)
    : net_(std::move(net)),
      options_(std::move(options)),
      optimizer_(options_.optimizer),
      inter_pool_(options_.inter_op_threads),
      intra_pool_(options_.intra_op_threads) {
  check_metrics(options_);

  train_graph_ = std::make_shared<Graph>();
  train_pass_ = std::make_unique<Pass>();
  trace_training(*train_graph_, *train_pass_);
  if (options_.auto_control_dependencies) add_auto_control_dependencies(*train_graph_);
  infer_graph_ = std::make_shared<Graph>();
  infer_pass_ = std::make_unique<Pass>();
  trace_forward(*infer_graph_, *infer_pass_, false);

  // A device strict placement refuses is found now, before a caller writes anything, not at the first step.
  if (options_.placement.strict)
    for (const auto& [graph, pass] : {std::pair{train_graph_.get(), train_pass_.get()}, std::pair{infer_graph_.get(), infer_pass_.get()}}) {
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

BatchSums Model::run_batches(Session& session, const Pass& pass, const Dataset& data,
                             std::span<const std::int64_t> order, std::int64_t batch_size, bool training,
                             std::int64_t first_step, const BatchSums& start, const StepCallback& on_step) {
  const std::int64_t n = static_cast<std::int64_t>(order.size());
  const std::int64_t steps = (n + batch_size - 1) / batch_size;
  steps_run_ = 0;
  const bool classification = loss_is_classification(options_.loss);
  const bool binary = loss_is_binary(options_.loss);
  BatchSums totals = start;
  std::vector<Output> fetches{training ? pass.loss : pass.per_example, pass.predictions};
  auto rows_of = [&](std::int64_t step) {
    return order.subspan(static_cast<std::size_t>(step * batch_size),
                         static_cast<std::size_t>(std::min(batch_size, n - step * batch_size)));
  };
  auto fill = [&](std::int64_t step, Batch& batch) {
    batch.step = step;
    gather_rows(data.x, rows_of(step), batch.x);
    targets_into(data, rows_of(step), batch.y);
  };

  // With prefetch, a producer thread gathers the next batches while this one trains: they travel through
  // a FIFOQueue, and their buffers come back through a second one to be refilled.
  const std::int64_t prefetch = training ? options_.prefetch : 0;
  FIFOQueue<Batch> ready(static_cast<std::size_t>(std::max<std::int64_t>(prefetch, 1)));
  FIFOQueue<Batch> spare(static_cast<std::size_t>(prefetch + 2));
  std::thread producer;
  if (prefetch > 0) {
    for (std::int64_t i = 0; i < prefetch + 2; ++i) spare.enqueue(Batch{});
    producer = std::thread([&] {
      for (std::int64_t step = 0; step < steps; ++step) {
        Batch batch;
        if (spare.dequeue(batch) != QueueStatus::kOk) return;
        fill(step, batch);
        if (ready.enqueue(std::move(batch)) != QueueStatus::kOk) return;
      }
    });
  }
  // Closing both queues releases the producer however this function ends, even by an exception.
  struct Joiner {
    FIFOQueue<Batch>& a;
    FIFOQueue<Batch>& b;
    std::thread& t;
    ~Joiner() {
      a.close();
      b.close();
      if (t.joinable()) t.join();
    }
  } joiner{ready, spare, producer};

  Batch inline_batch;
  for (std::int64_t step = 0; step < steps; ++step) {
    Batch batch;
    if (prefetch > 0) {
      TCTL_CHECK(ready.dequeue(batch) == QueueStatus::kOk && batch.step == step, "prefetch queue out of order");
    } else {
      fill(step, inline_batch);
      batch = inline_batch;
    }
    auto rows = rows_of(step);
    const std::int64_t b = static_cast<std::int64_t>(rows.size());
    std::vector<Feed> feeds{{pass.x, batch.x}, {pass.targets, batch.y}};
    RunOptions ro;
    ro.step = first_step + step;
    if (training) optimizer_.begin_step(ro.step);
    auto where = [&] {
      return fmt::format("epoch {}, step {} (step {} of the run)", current_epoch_,
                         first_step + step + 1 - (current_epoch_ - 1) * steps_per_epoch_, first_step + step + 1);
    };
    std::vector<Tensor> out;
    try {
      out = session.run(feeds, fetches, training ? std::span<const Output>(pass.updates) : std::span<const Output>{}, ro);
    } catch (const NonFiniteError& e) {
      // An update refused a NaN or infinite gradient before writing: find where it began.
      throw RuntimeError(fmt::format("{} at {}: {}; lower the learning rate or standardize the data", e.what(), where(),
                                     find_non_finite(batch.x, batch.y, first_step + step)));
    }
    feeds.clear();
    if (prefetch > 0) spare.enqueue(std::move(batch));
    BatchSums sums;
    if (training) {
      const float loss = out[0].item();
      if (!std::isfinite(loss))
        throw RuntimeError(fmt::format("loss became {} at {}: {}; lower the learning rate or standardize the data",
                                       std::isnan(loss) ? "NaN" : "infinite", where(),
                                       find_non_finite(batch.x, batch.y, first_step + step)));
      sums.loss = static_cast<double>(loss) * static_cast<double>(b);
    } else {
      const float* l = out[0].data<float>();
      for (std::int64_t i = 0; i < b; ++i) sums.loss += l[i];
    }
    const Tensor& pred = out[1];
    const std::int64_t width = pred.num_elements() / std::max<std::int64_t>(b, 1);
    const float* p = pred.data<float>();
    if (classification) {
      for (std::int64_t i = 0; i < b; ++i) {
        std::int64_t label = data.y.data<std::int32_t>()[rows[static_cast<std::size_t>(i)]];
        const float* row = p + i * width;
        sums.correct += argmax_row(row, width) == label ? 1.0 : 0.0;
        // The label's rank: how many classes score strictly higher (ties count in the label's favour).
        std::int64_t above = 0;
        for (std::int64_t j = 0; j < width; ++j) above += row[j] > row[label] ? 1 : 0;
        sums.top_k_correct += above < kTopK ? 1.0 : 0.0;
      }
    } else {
      for (std::int64_t i = 0; i < b; ++i) {
        const float* t = data.y.data<float>() + rows[static_cast<std::size_t>(i)] * width;
        for (std::int64_t j = 0; j < width; ++j) {
          double d = static_cast<double>(p[i * width + j]) - t[j];
          sums.abs_error += std::abs(d);
          sums.sq_error += d * d;
          // Binary accuracy (Keras' threshold 0.5), averaged over the outputs of a row.
          if (binary) sums.correct += ((p[i * width + j] > 0.5f) == (t[j] > 0.5f)) / static_cast<double>(width);
        }
      }
      sums.values = b * width;
    }
    sums.examples = b;
    totals += sums;
    if (on_step) on_step(step + 1, steps, averages(totals, options_.metrics));
    steps_run_ = step + 1;
    if (training && interrupt_ != nullptr && interrupt_->load(std::memory_order_relaxed)) break;
  }
  return totals;
}

std::vector<EpochResult> Model::fit(const Dataset& train, const Dataset* validation, std::int64_t epochs,
                                    std::int64_t batch_size, const EpochCallback& on_epoch, const StepCallback& on_step,
                                    const FitPosition& start) {
  std::vector<EpochResult> history;
  interrupted_at_.reset();
  stop_after_epoch_ = false;
  const std::int64_t n = train.size();
  const std::int64_t steps_per_epoch = (n + batch_size - 1) / batch_size;
  TCTL_CHECK(start.steps_done >= 0 && (start.steps_done == 0 || start.steps_done < steps_per_epoch),
             "fit() resumed past the end of its epoch");
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t epoch = start.epoch; epoch <= epochs; ++epoch) {
    for (std::int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
    // A fresh generator per epoch, keyed by (seed, epoch), so a resumed run shuffles exactly as before.
    std::mt19937_64 rng(options_.seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(epoch));
    for (std::int64_t i = n - 1; i > 0; --i)
      std::swap(order[static_cast<std::size_t>(i)], order[rng() % static_cast<std::uint64_t>(i + 1)]);
    // The resumed epoch starts from the sums of the steps taken before the checkpoint, so its row averages
    // every step of the epoch, added in the same order as in a run that never stopped.
    const bool resumed = epoch == start.epoch;
    const std::int64_t skip = resumed ? start.steps_done : 0;
    const std::span<const std::int64_t> rows =
        std::span<const std::int64_t>(order).subspan(static_cast<std::size_t>(std::min(n, skip * batch_size)));
    auto started = std::chrono::steady_clock::now();
    current_epoch_ = epoch;
    steps_per_epoch_ = steps_per_epoch;
    const BatchSums sums = run_batches(*train_session_, *train_pass_, train, rows, batch_size, true,
                                       (epoch - 1) * steps_per_epoch + skip, resumed ? start.sums : BatchSums{}, on_step);
    const std::int64_t done = skip + steps_run_;
    if (done < steps_per_epoch) {  // interrupted inside the epoch
      interrupted_at_ = FitPosition{epoch, done, sums};
      break;
    }
    EpochResult r;
    r.epoch = epoch;
    r.steps = steps_per_epoch;
    r.train = averages(sums, options_.metrics);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (validation != nullptr && validation->size() > 0) r.validation = evaluate(*validation, batch_size);
    if (on_epoch) on_epoch(r);
    history.push_back(std::move(r));
    if (stop_after_epoch_) break;
    if (interrupt_ != nullptr && interrupt_->load(std::memory_order_relaxed) && epoch < epochs) {
      interrupted_at_ = FitPosition{epoch + 1, 0, {}};
      break;
    }
  }
  return history;
}

MetricValues Model::evaluate(const Dataset& data, std::int64_t batch_size) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(data.size()));
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int64_t>(i);
  return averages(run_batches(*infer_session_, *infer_pass_, data, order, batch_size, false, 0, {}, {}), options_.metrics);
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
