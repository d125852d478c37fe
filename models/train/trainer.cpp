#include "models/train/trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "core/ceil_div.h"
#include "core/errors.h"
#include "core/fifo_queue.h"

namespace tctl {

namespace {

// One batch of feeds on its way from the producer to the training loop.
struct Batch {
  Tensor x;
  Tensor y;
  Tensor host_x;  // where x is gathered: x itself, or the copy of it on the model's input device
  std::int64_t step = -1;
};

// With prefetch, a producer thread gathers the next batches while the loop trains: they travel through a
// FIFOQueue, and their buffers come back through a second one to be refilled. Without, each batch is
// gathered when asked for, into one reused pair of buffers.
class BatchSource {
 public:
  using Fill = std::function<void(std::int64_t step, Batch& batch)>;
  BatchSource(std::int64_t prefetch, std::int64_t steps, Fill fill)
      : prefetch_(prefetch),
        fill_(std::move(fill)),
        ready_(static_cast<std::size_t>(std::max<std::int64_t>(prefetch, 1))),
        spare_(static_cast<std::size_t>(prefetch + 2)) {
    if (prefetch_ == 0) return;
    for (std::int64_t i = 0; i < prefetch_ + 2; ++i) spare_.enqueue(Batch{});
    producer_ = std::thread([this, steps] {
      try {
        for (std::int64_t step = 0; step < steps; ++step) {
          Batch batch;
          if (spare_.dequeue(batch) != QueueStatus::kOk) return;
          fill_(step, batch);
          if (ready_.enqueue(std::move(batch)) != QueueStatus::kOk) return;
        }
      } catch (...) {
        // The loop rethrows it when it asks for the batch that failed; the queue's lock orders the two.
        error_ = std::current_exception();
        ready_.close();
      }
    });
  }
  // Closing both queues releases the producer however the loop ends, even by an exception.
  ~BatchSource() {
    ready_.close();
    spare_.close();
    if (producer_.joinable()) producer_.join();
  }
  BatchSource(const BatchSource&) = delete;
  BatchSource& operator=(const BatchSource&) = delete;

  Batch next(std::int64_t step) {
    if (prefetch_ == 0) {
      fill_(step, inline_);
      return inline_;
    }
    Batch batch;
    const QueueStatus status = ready_.dequeue(batch);
    if (status != QueueStatus::kOk && error_) std::rethrow_exception(error_);
    TCTL_CHECK(status == QueueStatus::kOk && batch.step == step, "prefetch queue out of order");
    return batch;
  }
  // The loop is done with the batch's buffers.
  void give_back(Batch&& batch) {
    if (prefetch_ > 0) spare_.enqueue(std::move(batch));
  }

 private:
  std::int64_t prefetch_;
  Fill fill_;
  FIFOQueue<Batch> ready_;
  FIFOQueue<Batch> spare_;
  std::thread producer_;
  std::exception_ptr error_;  // what stopped the producer; written before ready_ closes
  Batch inline_;
};

}  // namespace

std::string Trainer::where(std::int64_t step) const {
  return fmt::format("epoch {}, step {} (step {} of the run)", current_epoch_,
                     step + 1 - (current_epoch_ - 1) * steps_per_epoch_, step + 1);
}

std::vector<Tensor> Trainer::run_step(const Tensor& x, const Tensor& y, std::int64_t step, const Dataset& data,
                                      std::span<const std::int64_t> rows) {
  const auto batch_rows = static_cast<std::int64_t>(rows.size());
  // The replay that names the first op gone NaN runs the whole batch, of which a worker was fed its share.
  auto find_non_finite = [&] {
    if (x.shape()[0] == batch_rows && x.device() == cpu_device()) return model_.find_non_finite(x, y, step);
    Tensor whole_x, whole_y;
    return model_.find_non_finite(gather_rows(data.x, rows, whole_x), model_.targets_into(data, rows, whole_y), step);
  };
  std::vector<Tensor> out;
  try {
    out = model_.train_batch(x, y, step, batch_rows);
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
                               std::int64_t first_step, const BatchSums& start, const StepCallback& on_step) {
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
  std::atomic<bool> stepped{false};
  BatchSource source(prefetch ? options.prefetch : 0, steps, [&](std::int64_t step, Batch& batch) {
    batch.step = step;
    const auto rows = fed_rows(step);
    // Letting go of the last step's x first: on the host, its buffer is gathered into again; on the
    // device, it is given back before the next copy is made.
    batch.x.reset();
    batch.x = gather_rows(data.x, rows, batch.host_x);
    if (to != nullptr && stepped.load(std::memory_order_acquire)) {
      try {
        batch.x = batch.host_x.to(to);
      } catch (const RuntimeError&) {
        // Out of device memory, say: x stays on the host, and the step's own copy, trying again, names its
        // node if it fails too.
      }
    }
    model_.targets_into(data, rows, batch.y);
  });
  BatchSums totals = start;
  for (std::int64_t step = 0; step < steps; ++step) {
    const auto asked = std::chrono::steady_clock::now();
    Batch batch = source.next(step);
    input_wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
    const auto rows = rows_of(step);
    const std::vector<Tensor> out = run_step(batch.x, batch.y, first_step + step, data, rows);
    stepped.store(true, std::memory_order_release);
    source.give_back(std::move(batch));
    BatchSums sums;
    sums.loss = static_cast<double>(out[0].item()) * static_cast<double>(rows.size());
    add_metric_sums(out[1], data, rows, options.loss, sums);
    totals += sums;
    if (on_step) on_step(step + 1, steps, averages(totals, options.metrics));
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
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t epoch = start.epoch; epoch <= epochs; ++epoch) {
    for (std::int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
    // A fresh generator per epoch, keyed by (seed, epoch), so a resumed run shuffles exactly as before.
    std::mt19937_64 rng(model_.options().seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(epoch));
    for (std::int64_t i = n - 1; i > 0; --i)
      std::swap(order[static_cast<std::size_t>(i)], order[rng() % static_cast<std::uint64_t>(i + 1)]);
    // The resumed epoch starts from the sums of the steps taken before the checkpoint, so its row averages
    // every step of the epoch, added in the same order as in a run that never stopped.
    const bool resumed = epoch == start.epoch;
    const std::int64_t skip = resumed ? start.steps_done : 0;
    const std::span<const std::int64_t> rows =
        std::span<const std::int64_t>(order).subspan(static_cast<std::size_t>(std::min(n, skip * batch_size)));
    const auto started = std::chrono::steady_clock::now();
    current_epoch_ = epoch;
    steps_per_epoch_ = steps_per_epoch;
    const BatchSums sums = run_batches(train, rows, batch_size, (epoch - 1) * steps_per_epoch + skip,
                                       resumed ? start.sums : BatchSums{}, on_step);
    const std::int64_t done = skip + steps_run_;
    if (done < steps_per_epoch) {  // interrupted inside the epoch
      interrupted_at_ = FitPosition{epoch, done, sums};
      break;
    }
    EpochResult r;
    r.epoch = epoch;
    r.steps = steps_per_epoch;
    r.train = averages(sums, model_.options().metrics);
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

MetricValues Trainer::evaluate(const Dataset& data, std::int64_t batch_size) {
  return model_.inference().evaluate(data, batch_size);
}

}  // namespace tctl
