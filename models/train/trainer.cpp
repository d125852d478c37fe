#include "models/train/trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <optional>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "core/ceil_div.h"
#include "core/errors.h"
#include "core/prefetcher.h"
#include "models/data/row_stream.h"

namespace tctl {

namespace {

// One batch of feeds on its way from the producer to the training loop.
struct Batch {
  Tensor x;
  Tensor y;
  Tensor host_x;  // where x is gathered: x itself, or the copy of it on the model's input device
  // Moved by a device's copy stream (Device::copy_stream): x's buffer there, kept from batch to batch, and
  // the event of the copy into it, which the step waits for on the device.
  Tensor device_x;
  std::shared_ptr<Event> ready;

  Batch() = default;
  Batch(const Batch&) = default;
  Batch(Batch&&) = default;
  Batch& operator=(const Batch&) = default;
  Batch& operator=(Batch&&) = default;
  // A copy still on its way writes device_x (a run stopped with batches prefetched): it lands before the
  // buffer can go back to the device's pool.
  ~Batch() {
    if (ready == nullptr) return;
    while (!ready->done()) std::this_thread::yield();
  }
};

// Moves the batch's x to `to` on the producer's copy stream (made at its first move, on its thread), into
// the batch's own buffer there, or, on a device without one, into a new buffer on the device's stream.
class BatchMover {
 public:
  explicit BatchMover(Device* to) : to_(to) {}
  // After a move that failed part way: a copy may still be writing the batch's buffer.
  void settle() noexcept {
    if (copies_ != nullptr) copies_->finish();
  }
  void move(Batch& batch) {
    batch.ready.reset();
    if (!asked_) {
      copies_ = to_->copy_stream();
      asked_ = true;
    }
    if (copies_ == nullptr) {
      batch.x = batch.host_x.to(to_);
      return;
    }
    const Tensor& host = batch.host_x;
    if (!batch.device_x.defined() || !(batch.device_x.shape() == host.shape()) ||
        batch.device_x.dtype() != host.dtype()) {
      batch.device_x.reset();
      batch.device_x = Tensor::empty(host.dtype(), host.shape(), to_);
      // The block may be one the step running now let go of, with its kernels still queued. A kept buffer
      // needs no wait: the loop gave it back after its step ended.
      copies_->wait_for_device();
    }
    to_->copy_from_host(batch.device_x.raw_mutable_data(), host.raw_data(), host.bytes());
    batch.ready = to_->record_event();
    batch.x = batch.device_x;
  }

 private:
  Device* to_;
  bool asked_ = false;
  std::unique_ptr<CopyStream> copies_;
};

// With prefetch, a producer thread gathers the next batches while the loop trains (a Prefetcher, whose
// queues carry the batches there and their buffers back). Without, each batch is gathered when asked for,
// into one reused pair of buffers.
class BatchSource {
 public:
  using Fill = std::function<void(std::int64_t step, Batch& batch)>;
  BatchSource(std::int64_t prefetch, std::int64_t steps, Fill fill) : fill_(std::move(fill)) {
    if (prefetch > 0)
      prefetcher_.emplace(steps, static_cast<std::size_t>(prefetch), static_cast<std::size_t>(prefetch + 2), fill_);
  }

  Batch next(std::int64_t step) {
    if (!prefetcher_) {
      fill_(step, inline_);
      return inline_;
    }
    return prefetcher_->next(step);
  }
  // The loop is done with the batch's buffers.
  void give_back(Batch&& batch) {
    if (prefetcher_) prefetcher_->give_back(std::move(batch));
  }

 private:
  Fill fill_;
  Batch inline_;
  std::optional<Prefetcher<Batch>> prefetcher_;  // last: its thread stops before the members it uses go
};

}  // namespace

Trainer::Trainer(Model& model) : model_(model) {}
Trainer::~Trainer() = default;

std::string Trainer::where(std::int64_t step) const {
  return fmt::format("epoch {}, step {} (step {} of the run)", current_epoch_,
                     step + 1 - (current_epoch_ - 1) * steps_per_epoch_, step + 1);
}

std::vector<Tensor> Trainer::run_step(const Tensor& x, const Tensor& y, std::int64_t step, const Dataset& data,
                                      std::span<const std::int64_t> rows) {
  // Gradient accumulation groups each epoch's steps; without it every step is its own update.
  const AccumulationStep accumulation =
      accumulation_step(current_epoch_, step - (current_epoch_ - 1) * steps_per_epoch_, epoch_rows_, batch_size_,
                        model_.options().optimizer.gradient_accumulation_steps);
  const auto batch_rows = static_cast<std::int64_t>(rows.size());
  // The replay that names the first op gone NaN runs the whole batch, of which a worker was fed its share.
  auto find_non_finite = [&] {
    if (x.shape()[0] == batch_rows && x.device() == cpu_device()) return model_.find_non_finite(x, y, step);
    Tensor whole_x, whole_y;
    return model_.find_non_finite(gather_rows(data.x, rows, whole_x), model_.targets_into(data, rows, whole_y), step);
  };
  std::vector<Tensor> out;
  try {
    out = model_.train_batch(x, y, step, batch_rows, accumulation);
  } catch (const NonFiniteError& e) {
    // An update refused a NaN or infinite gradient before writing: find where it began.
    throw RuntimeError(fmt::format("{} at {}: {}; lower the learning rate or standardize the data", e.what(),
                                   where(step), find_non_finite()));
  }
  const float loss = out[0].item();
  if (!std::isfinite(loss))
    throw RuntimeError(fmt::format("loss became {} at {}: {}; lower the learning rate or standardize the data",
                                   std::isnan(loss) ? "NaN" : "infinite", where(step), find_non_finite()));
  return out;
}

BatchSums Trainer::run_batches(const Dataset& data, std::span<const std::int64_t> order, std::int64_t batch_size,
                               std::int64_t first_step, const BatchSums& start, const StepCallback& on_step,
                               StepReport report) {
  const auto n = static_cast<std::int64_t>(order.size());
  const std::int64_t steps = ceil_div(n, batch_size);
  const ModelOptions& options = model_.options();
  steps_run_ = 0;
  auto rows_of = [&](std::int64_t step) {
    return order.subspan(static_cast<std::size_t>(step * batch_size),
                         static_cast<std::size_t>(std::min(batch_size, n - step * batch_size)));
  };
  // No batch holds more than the n rows (a batch size near 2^63 would overflow the product).
  const std::int64_t batch_bytes = data.size() == 0 ? 0
                                                    : static_cast<std::int64_t>(data.x.bytes() + data.y.bytes()) /
                                                          data.size() * std::min(batch_size, n);
  const bool prefetch = batch_bytes >= options.prefetch_min_bytes;
  // A training step reads only this process's rows of its batch (multi-worker: this worker's share).
  auto fed_rows = [&](std::int64_t step) {
    const auto rows = rows_of(step);
    const auto [first, count] = model_.local_rows(static_cast<std::int64_t>(rows.size()));
    return rows.subspan(static_cast<std::size_t>(first), static_cast<std::size_t>(count));
  };
  // With prefetch, the producer also moves each batch to the device its step reads it on (a GPU), so the
  // copy from host memory overlaps the step before instead of opening the next one.
  // Only once a step has run: the first places the variables, and a batch moved before them could take the
  // device memory they need. A move that fails leaves the batch on the host.
  Device* to = prefetch && options.prefetch > 0 ? model_.input_device() : nullptr;
  std::optional<BatchMover> mover;  // the producer's alone; it goes after the producer has stopped
  if (to != nullptr) mover.emplace(to);
  std::atomic<bool> stepped{false};
  BatchSource source(prefetch ? options.prefetch : 0, steps, [&](std::int64_t step, Batch& batch) {
    const auto rows = fed_rows(step);
    // Letting go of the last step's x first: on the host, its buffer is gathered into again; on the
    // device, it is given back before the next copy is made.
    batch.x.reset();
    batch.x = gather_rows(data.x, rows, batch.host_x);
    if (mover && stepped.load(std::memory_order_acquire)) {
      try {
        mover->move(batch);
      } catch (const RuntimeError&) {
        // Out of device memory, say: x stays on the host, and the step's own copy, trying again, names its
        // node if it fails too.
        mover->settle();
        batch.x = batch.host_x;
        batch.device_x.reset();
        batch.ready.reset();
      } catch (...) {
        mover->settle();  // the buffer may go with the batch: no copy may still be writing it
        throw;
      }
    }
    model_.targets_into(data, rows, batch.y);
  });
  BatchSums totals = start;
  for (std::int64_t step = 0; step < steps; ++step) {
    const auto asked = std::chrono::steady_clock::now();
    Batch batch = source.next(step);
    input_wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
    if (batch.ready != nullptr) to->queue_wait(*batch.ready);  // the device's stream waits for the copy
    const auto rows = rows_of(step);
    const std::vector<Tensor> out = run_step(batch.x, batch.y, first_step + step, data, rows);
    stepped.store(true, std::memory_order_release);
    source.give_back(std::move(batch));
    BatchSums sums;
    sums.loss = static_cast<double>(out[0].item()) * static_cast<double>(rows.size());
    add_metric_sums(out[1], data, rows, options.loss, sums);
    totals += sums;
    if (on_step)
      on_step(report.before + step + 1, report.total > 0 ? report.total : steps, averages(totals, options.metrics));
    steps_run_ = step + 1;
    if (model_.stop_requested()) break;
  }
  return totals;
}

std::vector<EpochResult> Trainer::fit(const Dataset& train, const Dataset* validation, std::int64_t epochs,
                                      std::int64_t batch_size, const EpochCallback& on_epoch,
                                      const StepCallback& on_step, const FitPosition& start) {
  std::vector<EpochResult> history;
  // A checkpoint restored since the model was made went into the first replica only.
  model_.sync_replicas();
  interrupted_at_.reset();
  stop_after_epoch_ = false;
  const std::int64_t n = train.size();
  const std::int64_t steps_per_epoch = ceil_div(n, batch_size);
  TCTL_CHECK(start.steps_done >= 0 && (start.steps_done == 0 || start.steps_done < steps_per_epoch),
             "fit() resumed past the end of its epoch");
  if (train.stream && train.stream->windows() > 1)
    feed_ = std::make_unique<WindowFeed>(train, model_.options().seed, start, epochs, batch_size);
  // However fit ends, the feed's thread stops while the data it reads is still there.
  struct FeedStop {
    std::unique_ptr<WindowFeed>& feed;
    ~FeedStop() { feed.reset(); }
  } stop_feed{feed_};
  for (std::int64_t epoch = start.epoch; epoch <= epochs; ++epoch) {
    // The resumed epoch starts from the sums of the steps taken before the checkpoint, so its row averages
    // every step of the epoch, added in the same order as in a run that never stopped.
    const bool resumed = epoch == start.epoch;
    const std::int64_t skip = resumed ? start.steps_done : 0;
    const auto started = std::chrono::steady_clock::now();
    const double skipped_before =
        model_.optimizer().skipped_steps() - static_cast<double>(resumed ? start.skipped_steps : 0);
    current_epoch_ = epoch;
    steps_per_epoch_ = steps_per_epoch;
    epoch_rows_ = n;
    batch_size_ = batch_size;
    const BatchSums sums = run_epoch(train, epoch, batch_size, skip, resumed ? start.sums : BatchSums{}, on_step);
    const std::int64_t done = skip + steps_run_;
    if (done < steps_per_epoch) {  // interrupted inside the epoch
      interrupted_at_ = FitPosition{epoch, done, sums,
                                    static_cast<std::int64_t>(model_.optimizer().skipped_steps() - skipped_before)};
      break;
    }
    EpochResult r;
    r.epoch = epoch;
    r.steps = steps_per_epoch;
    r.train = averages(sums, model_.options().metrics);
    // Dynamic loss scaling (mixed_float16): the steps this epoch skipped for overflow, and the scale it ends at.
    if (model_.optimizer().config().loss_scale.dynamic) {
      r.train.emplace_back("skipped_steps", model_.optimizer().skipped_steps() - skipped_before);
      r.train.emplace_back("loss_scale", model_.optimizer().loss_scale());
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (validation != nullptr && validation->size() > 0) r.validation = evaluate(*validation, batch_size);
    if (on_epoch) on_epoch(r);
    if (keep_history_) history.push_back(std::move(r));
    if (stop_after_epoch_) break;
    if (model_.stop_requested() && epoch < epochs) {
      interrupted_at_ = FitPosition{epoch + 1, 0, {}};
      break;
    }
  }
  return history;
}

namespace {

// Positions [0, n) shuffled by `rng` (Fisher-Yates, the draws every run of a seed makes).
void shuffle_positions(std::vector<std::int64_t>& order, std::int64_t n, std::mt19937_64& rng) {
  order.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  for (std::int64_t i = n - 1; i > 0; --i)
    std::swap(order[static_cast<std::size_t>(i)], order[rng() % static_cast<std::uint64_t>(i + 1)]);
}

// The generator an epoch shuffles with: keyed by (seed, epoch), so a resumed run shuffles exactly as before.
std::mt19937_64 epoch_rng(std::uint64_t seed, std::int64_t epoch) {
  return std::mt19937_64(seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(epoch));
}

// A streamed epoch's windows: their order (the generator's first draws), and for a resumed epoch the windows
// its `skip` steps trained, whose rows' draws are made again to leave the generator where it was.
struct WindowPlan {
  std::vector<std::int64_t> order;
  std::int64_t first = 0;          // the first window still to train
  std::int64_t skip_in_first = 0;  // of whose steps this many were trained
};
WindowPlan plan_windows(const RowStream& stream, std::int64_t skip, std::int64_t batch_size, std::mt19937_64& rng) {
  WindowPlan plan;
  shuffle_positions(plan.order, stream.windows(), rng);
  plan.skip_in_first = skip;
  std::vector<std::int64_t> drawn;
  while (plan.first < stream.windows()) {
    const std::int64_t size = stream.window_size(plan.order[static_cast<std::size_t>(plan.first)]);
    if (plan.skip_in_first < ceil_div(size, batch_size)) break;
    plan.skip_in_first -= ceil_div(size, batch_size);
    shuffle_positions(drawn, size, rng);
    ++plan.first;
  }
  return plan;
}

}  // namespace

// A streamed fit's training windows, epoch after epoch, read ahead on a Prefetcher's thread across the ends
// of epochs too, so that an epoch's first window is read while the last one before it trains (the window
// read at the start of each epoch was 11% of an 8-window epoch, bench/csv_load.sh).
class Trainer::WindowFeed {
 public:
  WindowFeed(const Dataset& train, std::uint64_t seed, const FitPosition& start, std::int64_t epochs,
             std::int64_t batch_size)
      : train_(train),
        seed_(seed),
        epoch_(start.epoch),
        windows_(count(train, seed, start, epochs, batch_size)),
        feed_(windows_, 1, 2, [this, skip = start.steps_done, batch_size](std::int64_t, Item& item) mutable {
          // Only the producer's thread runs this, one window after the other.
          if (next_ >= static_cast<std::int64_t>(order_.size())) {
            std::mt19937_64 rng = epoch_rng(seed_, epoch_);
            WindowPlan plan = plan_windows(*train_.stream, skip, batch_size, rng);
            skip = 0;
            order_ = std::move(plan.order);
            next_ = plan.first;
            ++epoch_;
          }
          item.first = order_[static_cast<std::size_t>(next_++)];
          train_.stream->load(item.first, train_, item.second);
        }) {}

  // How many windows the epochs to come read: all of every epoch's but those a resumed first epoch trained.
  static std::int64_t count(const Dataset& train, std::uint64_t seed, const FitPosition& start, std::int64_t epochs,
                            std::int64_t batch_size) {
    if (start.epoch > epochs) return 0;
    std::mt19937_64 rng = epoch_rng(seed, start.epoch);
    const std::int64_t skipped = plan_windows(*train.stream, start.steps_done, batch_size, rng).first;
    return (epochs - start.epoch + 1) * train.stream->windows() - skipped;
  }

  // The next window, which must be `window`; the seconds waited for it are added to `waited`.
  Dataset next(std::int64_t window, double& waited) {
    const auto asked = std::chrono::steady_clock::now();
    Item item = feed_.next(taken_++);
    waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
    TCTL_CHECK(item.first == window, "streamed windows out of order");
    return std::move(item.second);
  }
  void give_back(Dataset&& window) { feed_.give_back({-1, std::move(window)}); }

 private:
  using Item = std::pair<std::int64_t, Dataset>;
  const Dataset& train_;
  std::uint64_t seed_;
  std::int64_t epoch_;  // the producer's: the epoch whose windows it reads next
  std::vector<std::int64_t> order_;
  std::int64_t next_ = 0;  // the producer's: in order_
  std::int64_t windows_;   // in all the epochs to come
  std::int64_t taken_ = 0;
  Prefetcher<Item> feed_;  // last: its thread stops before the members it uses go
};

BatchSums Trainer::run_epoch(const Dataset& train, std::int64_t epoch, std::int64_t batch_size, std::int64_t skip,
                             const BatchSums& start, const StepCallback& on_step) {
  const std::int64_t first_step = (epoch - 1) * steps_per_epoch_ + skip;
  std::mt19937_64 rng = epoch_rng(model_.options().seed, epoch);
  std::vector<std::int64_t> order;
  if (!train.stream || train.stream->windows() == 1) {
    // In memory, or a stream's one window, which stays in memory (RowStream::resident).
    const Dataset* data = &train;
    if (train.stream) {
      const auto asked = std::chrono::steady_clock::now();
      data = &train.stream->resident(train);
      input_wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
    }
    const std::int64_t n = data->size();
    shuffle_positions(order, n, rng);
    const auto rows =
        std::span<const std::int64_t>(order).subspan(static_cast<std::size_t>(std::min(n, skip * batch_size)));
    return run_batches(*data, rows, batch_size, first_step, start, on_step);
  }
  // Streamed: the windows in a shuffled order, then each window's rows shuffled, from the same generator. A
  // window holds whole batches (row_stream.h): a resumed epoch skips whole windows, then steps of the next.
  WindowPlan plan = plan_windows(*train.stream, skip, batch_size, rng);
  const std::int64_t steps = ceil_div(train.size(), batch_size) - skip;
  BatchSums totals = start;
  std::int64_t run = 0;
  for (auto k = static_cast<std::size_t>(plan.first); k < plan.order.size(); ++k) {
    Dataset window = feed_->next(plan.order[k], input_wait_seconds_);
    const std::int64_t n = window.size();
    shuffle_positions(order, n, rng);
    const auto rows = std::span<const std::int64_t>(order).subspan(
        static_cast<std::size_t>(std::min(n, plan.skip_in_first * batch_size)));
    plan.skip_in_first = 0;
    const std::int64_t want = ceil_div(static_cast<std::int64_t>(rows.size()), batch_size);
    totals = run_batches(window, rows, batch_size, first_step + run, totals, on_step, {run, steps});
    run += steps_run_;
    feed_->give_back(std::move(window));
    if (steps_run_ < want || model_.stop_requested()) break;
  }
  steps_run_ = run;
  return totals;
}

MetricValues Trainer::evaluate(const Dataset& data, std::int64_t batch_size) {
  // use_ema: evaluated with the averages in the weights' place, and the weights back after, however it ends.
  struct AveragesIn {
    Model& model;
    explicit AveragesIn(Model& m) : model(m) { model.swap_averages(); }
    ~AveragesIn() { model.swap_averages(); }
    AveragesIn(const AveragesIn&) = delete;
    AveragesIn& operator=(const AveragesIn&) = delete;
  } averages(model_);
  return model_.inference().evaluate(data, batch_size);
}

}  // namespace tctl
