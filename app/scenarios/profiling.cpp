#include "app/scenarios/profiling.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include "core/errors.h"
#include "core/prefetcher.h"
#include "models/data/row_stream.h"
#include "models/io/spec_reader.h"
#include "models/record/prepared_data.h"
#include "models/train/model_builder.h"
#include "models/train/split_step.h"

namespace tctl {

TimeStats time_stats(std::vector<double> samples) {
  TimeStats s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.median = samples[samples.size() / 2];
  s.min = samples.front();
  s.max = samples.back();
  return s;
}

namespace {

// Random batches of the model's input shape (token ids for a model that starts with an embedding), for a
// spec without data.
std::vector<std::pair<Tensor, Tensor>> random_batches(const TrainConfig& c, Model& model, std::int64_t batch,
                                                      std::int64_t count) {
  std::vector<std::pair<Tensor, Tensor>> out;
  const Sequential& net = model.net();
  std::mt19937_64 rng(c.seed);
  auto uniform = [&] {
    return static_cast<float>(static_cast<double>(rng() >> 11) / 9007199254740992.0) * 2.0f - 1.0f;
  };
  const std::int64_t classes = net.output_shape().num_elements();
  for (std::int64_t b = 0; b < count; ++b) {
    Tensor x = Tensor::empty(DType::kF32, Shape::concat(batch, net.input_shape()));
    // A model whose inputs are token ids (Sequential::id_layer) gets random ids it knows.
    const std::int64_t ids = net.input_token_ids();
    for (std::int64_t i = 0; i < x.num_elements(); ++i)
      x.mutable_data<float>()[i] = ids > 0 ? static_cast<float>(rng() % static_cast<std::uint64_t>(ids)) : uniform();
    Dataset d;
    d.x = x;
    if (c.loss.empty()) {
      out.emplace_back(x, Tensor{});  // forward only, no targets
      continue;
    }
    if (loss_is_classification(c.loss)) {
      std::vector<std::int32_t> labels(static_cast<std::size_t>(batch));
      for (auto& l : labels) l = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(classes));
      d.y = Tensor::from_ints(Shape{batch}, labels);
      d.num_classes = static_cast<int>(classes);
    } else {
      d.y = Tensor::empty(DType::kF32, Shape{batch, net.output_shape().num_elements()});
      for (std::int64_t i = 0; i < d.y.num_elements(); ++i) d.y.mutable_data<float>()[i] = uniform();
    }
    std::vector<std::int64_t> rows(static_cast<std::size_t>(batch));
    for (std::int64_t i = 0; i < batch; ++i) rows[static_cast<std::size_t>(i)] = i;
    out.emplace_back(x, model.targets_for(d, rows));
  }
  return out;
}

// The batches the profiled steps train on. A config with data: its training rows, prepared once (read,
// decoded or vectorized, split, standardized, as train prepares them) and gathered per step in a seeded
// shuffled order into reused buffers, as train's batch producer gathers them (gather_rows, targets_into), the
// gather timed; without prefetching that gather is what a step waits for its data. A streamed data set of
// many windows is read as train reads it: window after window (round again when the last is used) on a
// reader thread of its own, one window ahead, each read's time kept for the trace; a step that finds the next
// window not read yet waits for it, and that wait is part of its gather. A spec: 8 random batches made in
// advance, untimed.
class BatchFeed {
 public:
  using Clock = std::chrono::steady_clock;
  struct Read {
    std::int64_t window;
    Clock::time_point start, end;
  };

  BatchFeed(const TrainConfig& c, Model& model, std::int64_t batch) : model_(model), batch_(batch), rng_(c.seed) {
    if (!c.data.any()) {
      fixed_ = random_batches(c, model, batch, 8);
      return;
    }
    const auto start = Clock::now();
    stream_part_ = prepare_data(c, model.net()).train;
    if (stream_part_.stream && stream_part_.stream->windows() > 1) {
      start_reader();
      next_window();
    } else {
      // One window, or data in memory: every step gathers from the same rows.
      if (stream_part_.stream)
        stream_part_.stream->load(0, stream_part_, data_);
      else
        data_ = stream_part_;
      shuffle_order();
    }
    prepare_seconds_ = std::chrono::duration<double>(Clock::now() - start).count();
  }

  bool has_data() const { return fixed_.empty(); }
  double prepare_seconds() const { return prepare_seconds_; }

  // The batch of step `it`, and the microseconds its gather took (0 for a random batch).
  std::pair<const std::pair<Tensor, Tensor>&, double> next(std::int64_t it) {
    if (!has_data()) return {fixed_[static_cast<std::size_t>(it) % fixed_.size()], 0.0};
    const auto start = Clock::now();
    if (reader_ && used_ >= static_cast<std::int64_t>(order_.size())) next_window();
    const auto n = static_cast<std::int64_t>(order_.size());
    current_ = {};  // the last batch let go of first, so its buffers are gathered into again
    rows_.clear();
    for (std::int64_t i = 0; i < batch_; ++i)
      rows_.push_back(order_[static_cast<std::size_t>((reader_ ? used_ + i : it * batch_ + i) % n)]);
    used_ += batch_;
    current_.first = gather_rows(data_.x, rows_, host_x_);
    current_.second = model_.targets_into(data_, rows_, host_y_);
    return {current_, std::chrono::duration<double, std::micro>(Clock::now() - start).count()};
  }

  // The windows the reader thread read so far, in order.
  std::vector<Read> reads() const {
    std::lock_guard<std::mutex> lock(reads_mu_);
    return reads_;
  }

 private:
  void shuffle_order() {
    order_.resize(static_cast<std::size_t>(data_.size()));
    std::iota(order_.begin(), order_.end(), std::int64_t{0});
    std::shuffle(order_.begin(), order_.end(), rng_);
    used_ = 0;
  }

  void start_reader() {
    const RowStream& stream = *stream_part_.stream;
    reader_ = std::make_unique<Prefetcher<Dataset>>(std::numeric_limits<std::int64_t>::max(), 1, 2,
                                                    [this, &stream](std::int64_t i, Dataset& into) {
                                                      const auto start = Clock::now();
                                                      stream.load(i % stream.windows(), stream_part_, into);
                                                      std::lock_guard<std::mutex> lock(reads_mu_);
                                                      reads_.push_back({i % stream.windows(), start, Clock::now()});
                                                    });
  }

  // The next window from the reader, the one used handed back to be read into again.
  void next_window() {
    if (data_.x.defined()) reader_->give_back(std::move(data_));
    data_ = reader_->next(taken_++);
    shuffle_order();
  }

  Model& model_;
  std::int64_t batch_;
  std::mt19937_64 rng_;
  std::vector<std::pair<Tensor, Tensor>> fixed_;
  Dataset stream_part_;  // the training part as prepared: a stream, or the rows in memory
  Dataset data_;         // the rows batches are gathered from: all of them, or the window in use
  double prepare_seconds_ = 0;
  std::vector<std::int64_t> order_, rows_;
  std::int64_t used_ = 0, taken_ = 0;  // rows of the window used; windows taken from the reader
  Tensor host_x_, host_y_;
  std::pair<Tensor, Tensor> current_;
  mutable std::mutex reads_mu_;
  std::vector<Read> reads_ TCTL_GUARDED_BY(reads_mu_);
  std::unique_ptr<Prefetcher<Dataset>> reader_;  // last: stopped before what its thread uses goes
};

// The time the spans cover together, overlaps counted once.
double covered_us(std::vector<std::pair<double, double>> spans) {
  std::sort(spans.begin(), spans.end());
  double total = 0, reached = -1e300;
  for (const auto& [start, end] : spans) {
    total += std::max(0.0, end - std::max(start, reached));
    reached = std::max(reached, end);
  }
  return total;
}

// What the measured steps gave: kernel time per (layer, phase) and per node, device time per layer, node and
// stream, each step's wall time with and without the profiler, and the last measured step's events.
struct StepSamples {
  struct NodeSamples {
    OpProfile info;
    std::vector<double> host, device;
  };
  std::map<std::string, std::vector<double>> forward, backward, device, stream_busy;
  // By graph node id (the copies placement added, which have none, last), then name.
  std::map<std::pair<int, std::string>, NodeSamples> per_node;
  std::vector<double> steps, unprofiled, kernels;
  std::vector<double> input;  // each measured step's gather of its batch (BatchFeed), a config with data only
  std::vector<ProfileEvent> last_events;
  std::optional<TraceSpan> last_input;  // the last measured step's gather, for --trace
  // When the first measured step began, and the profiler's epoch for the last one (the trace's time axis).
  Profiler::Clock::time_point first_measured, last_cleared;

  void add(const std::vector<ProfileEvent>& events) {
    std::map<std::string, double> f, b, d;
    std::map<std::pair<int, std::string>, std::pair<double, double>> nodes;  // host, device
    std::map<std::string, std::vector<std::pair<double, double>>> spans;
    double total = 0;
    for (const ProfileEvent& e : events) {
      const double host = e.end_us - e.start_us;
      const double on_device = e.device_timed ? e.device_end_us - e.device_start_us : 0;
      const std::string layer = e.layer.empty() ? "(graph)" : e.layer;
      (e.phase == Phase::kForward ? f : b)[layer] += host;
      const auto key = std::pair{e.node_id >= 0 ? e.node_id : std::numeric_limits<int>::max(), e.name};
      if (!per_node.contains(key)) per_node[key].info = {e.layer, e.name, e.op, phase_name(e.phase), {}, {}};
      nodes[key].first += host;
      nodes[key].second += on_device;
      total += host;
      if (!e.device_timed) continue;
      d[layer] += on_device;
      spans[e.device].emplace_back(e.device_start_us, e.device_end_us);
    }
    for (auto& [k, v] : f) forward[k].push_back(v);
    for (auto& [k, v] : b) backward[k].push_back(v);
    for (auto& [k, v] : d) device[k].push_back(v);
    for (auto& [k, v] : spans) stream_busy[k].push_back(covered_us(v));
    for (auto& [k, v] : nodes) {
      per_node[k].host.push_back(v.first);
      per_node[k].device.push_back(v.second);
    }
    kernels.push_back(total);
    last_events = events;
  }
};

// Runs the warm-up and the measured steps. Measured steps alternate with unprofiled ones (which continue
// the training), so both see the same state of the machine and the difference is the profiler's cost.
StepSamples measure_steps(Model& model, BatchFeed& feed, const ProfileOptions& o) {
  StepSamples samples;
  Profiler::Clock::time_point cleared;  // the profiler's epoch, near enough: just after its clear()
  auto run_step = [&](std::int64_t it, Profiler* p, bool measured) {
    const auto gathering = Profiler::Clock::now();
    const auto [batch, gather_us] = feed.next(it);
    const auto& [x, y] = batch;
    if (measured && feed.has_data()) samples.input.push_back(gather_us);
    // The profiled step's batch on the trace's input track, before the step's kernels.
    if (p != nullptr && feed.has_data()) {
      const double from = std::chrono::duration<double, std::micro>(gathering - cleared).count();
      samples.last_input = TraceSpan{"input pipeline", "gather batch", from, from + gather_us};
    }
    const auto start = std::chrono::steady_clock::now();
    if (o.forward_only) {
      o.eager ? model.eager_forward_step(x, p) : model.forward_step(x, p);
    } else {
      o.eager ? model.eager_train_step(x, y, it, p) : model.train_step(x, y, it, p);
    }
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  };
  Profiler profiler;
  std::int64_t step_number = 0;
  for (std::int64_t it = 0; it < o.warmup + o.iterations; ++it) {
    const bool measured = it >= o.warmup;
    profiler.clear();
    cleared = Profiler::Clock::now();
    if (it == o.warmup) samples.first_measured = cleared;
    samples.last_cleared = cleared;
    if (measured) samples.unprofiled.push_back(run_step(step_number++, nullptr, true));
    const double step_us = run_step(step_number++, measured ? &profiler : nullptr, measured);
    if (!measured) continue;
    samples.steps.push_back(step_us);
    samples.add(profiler.events());
  }
  return samples;
}

// One row per layer in model order, then the rows outside the model's layers (loss, optimizer). One pass over
// the layers, the samples and the graph's nodes, with maps by name: a search of all of them per layer took
// minutes for a stack of 100,000 layers.
std::vector<LayerProfile> layer_rows(const Sequential& net, const Graph& g, StepSamples& s, std::int64_t batch_size) {
  std::vector<std::string> order;
  std::unordered_map<std::string, std::size_t> index;  // layer name -> its index in the model
  for (std::size_t i = 0; i < net.layers().size(); ++i) {
    order.push_back(net.layers()[i]->name());
    index[order.back()] = i;
  }
  std::unordered_set<std::string> listed(order.begin(), order.end());
  for (const auto* times : {&s.forward, &s.backward})
    for (const auto& [k, v] : *times)
      if (listed.insert(k).second) order.push_back(k);
  // Summed in node order, per layer, as one scan per row did.
  std::unordered_map<std::string, double> flops;
  for (const Node& n : g.nodes())
    if (listed.contains(n.layer)) flops[n.layer] += node_flops(g, n, batch_size);
  std::vector<LayerProfile> rows;
  for (const std::string& name : order) {
    LayerProfile row;
    row.name = name;
    if (auto it = index.find(name); it != index.end()) {
      const std::size_t i = it->second;
      row.type = net.layers()[i]->type();
      row.output_shape = Shape::concat(-1, net.layer_output_shapes()[i]).keras_string();
      row.params = net.layers()[i]->param_count();
    }
    if (s.forward.contains(name)) row.forward = time_stats(s.forward[name]);
    if (s.backward.contains(name)) row.backward = time_stats(s.backward[name]);
    if (s.device.contains(name)) row.device = time_stats(s.device[name]);
    if (auto it = flops.find(name); it != flops.end()) row.flops = it->second;
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

ProfileReport profile_training(const TrainConfig& config, const ProfileOptions& o) {
  TrainConfig c = config;
  c.inter_op_threads = o.inter_op_threads;
  c.intra_op_threads = o.intra_op_threads;
  std::unique_ptr<Model> model = build_model(c);
  const Graph& g = o.forward_only ? model->inference_graph() : model->training_graph();
  BatchFeed feed(c, *model, o.batch_size);
  StepSamples samples = measure_steps(*model, feed, o);

  ProfileReport report;
  report.eager = o.eager;
  report.inter_op_threads = o.inter_op_threads;
  report.intra_op_threads = o.intra_op_threads;
  report.last_events = samples.last_events;
  if (samples.last_input) report.trace_spans.push_back(*samples.last_input);
  // The window reader's thread: every read since the measured steps began, on the last step's time axis.
  for (const BatchFeed::Read& read : feed.reads()) {
    if (read.end < samples.first_measured) continue;
    auto us = [&](BatchFeed::Clock::time_point t) {
      return std::chrono::duration<double, std::micro>(t - samples.last_cleared).count();
    };
    report.trace_spans.push_back(
        {"window reader", "read window " + std::to_string(read.window), us(read.start), us(read.end)});
  }
  report.placement_warnings = model->placement_warnings();
  // The profiled graph is the first member's (a mirrored replica, a hogwild worker), which runs its share of
  // the batch's rows: its FLOPs are that share's, as its times are.
  const std::int64_t rows = first_row_of_member(o.batch_size, model->members(), 1);
  report.layers = layer_rows(model->net(), g, samples, rows);
  for (auto& [key, node] : samples.per_node) {
    node.info.time = time_stats(node.host);
    node.info.device = time_stats(node.device);
    report.ops.push_back(node.info);
  }
  for (const auto& [device, busy] : samples.stream_busy) report.streams.push_back({device, time_stats(busy)});
  report.step = time_stats(samples.steps);
  report.unprofiled = time_stats(samples.unprofiled);
  report.kernels = time_stats(samples.kernels);
  report.has_input = feed.has_data();
  report.prepare_seconds = feed.prepare_seconds();
  report.input = time_stats(samples.input);
  // Throughput is what a user gets: from the unprofiled steps.
  report.samples_per_second =
      report.unprofiled.median > 0 ? static_cast<double>(o.batch_size) * 1e6 / report.unprofiled.median : 0;
  return report;
}

}  // namespace tctl
