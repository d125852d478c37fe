// Prefetcher: a producer thread that fills items 0, 1, 2, ... ahead of the thread that uses them, in a fixed
// number of buffers that travel round two FIFOQueues (filled ones to the user, used ones back to be refilled),
// so memory stays bounded by those buffers whatever the count. The trainer's batches and a streamed data
// set's windows (models/data/row_stream.h) come through one.
//
// One thread calls next() and give_back(); the producer is the Prefetcher's own. An exception thrown by
// `fill` is rethrown by the next() that asks for the item it failed on.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <thread>
#include <utility>

#include "core/errors.h"
#include "core/fifo_queue.h"

namespace tctl {

template <class T>
class Prefetcher {
 public:
  using Fill = std::function<void(std::int64_t index, T& item)>;

  // Fills items [0, count) with `fill`, at most `ahead` of them waiting to be taken, in `buffers` buffers
  // (at least ahead + 1: one the user holds, the others filled or being filled).
  Prefetcher(std::int64_t count, std::size_t ahead, std::size_t buffers, Fill fill)
      : fill_(std::move(fill)), ready_(ahead), spare_(buffers) {
    TCTL_CHECK(buffers > ahead, "a Prefetcher needs a buffer more than it fills ahead");
    for (std::size_t i = 0; i < buffers; ++i) spare_.enqueue(T{});
    producer_ = std::thread([this, count] {
      try {
        for (std::int64_t index = 0; index < count; ++index) {
          Item item;
          if (spare_.dequeue(item.value) != QueueStatus::kOk) return;
          item.index = index;
          fill_(index, item.value);
          if (ready_.enqueue(std::move(item)) != QueueStatus::kOk) return;
        }
      } catch (...) {
        // next() rethrows it when it asks for the item that failed; the queue's lock orders the two.
        error_ = std::current_exception();
        ready_.close();
      }
    });
  }
  // Closing both queues releases the producer however the user stops, even by an exception.
  ~Prefetcher() {
    ready_.close();
    spare_.close();
    if (producer_.joinable()) producer_.join();
  }
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Item `index`, the next in order, once it is filled.
  T next(std::int64_t index) {
    Item item;
    const QueueStatus status = ready_.dequeue(item);
    if (status != QueueStatus::kOk && error_) std::rethrow_exception(error_);
    TCTL_CHECK(status == QueueStatus::kOk && item.index == index, "prefetch queue out of order");
    return std::move(item.value);
  }
  // The user is done with an item's buffers: they are filled again.
  void give_back(T&& item) { spare_.enqueue(std::move(item)); }

 private:
  struct Item {
    std::int64_t index = -1;
    T value;
  };
  Fill fill_;
  FIFOQueue<Item> ready_;
  FIFOQueue<T> spare_;
  std::thread producer_;
  std::exception_ptr error_;  // what stopped the producer; written before ready_ closes
};

}  // namespace tctl
