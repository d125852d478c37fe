// FIFOQueue: a bounded, blocking, closable queue that carries values between producer and consumer
// threads (TensorFlow's FIFOQueue). Thread-safe for any number of producers and consumers.
//
// enqueue blocks while the queue is full, dequeue while it is empty, each up to an optional timeout.
// close() refuses further enqueues and wakes every blocked thread: dequeues still drain what is queued, and
// once it is empty they return kClosed.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>

#include "core/errors.h"

namespace tctl {

enum class QueueStatus { kOk, kClosed, kTimeout };

template <class T>
class FIFOQueue {
 public:
  using Timeout = std::optional<std::chrono::milliseconds>;

  explicit FIFOQueue(std::size_t capacity) : capacity_(capacity) {
    TCTL_CHECK(capacity > 0, "a FIFOQueue needs a capacity of at least 1");
  }

  // kOk when queued; kClosed when the queue is (or becomes, while waiting) closed; kTimeout.
  QueueStatus enqueue(T value, Timeout timeout = std::nullopt) {
    std::unique_lock lock(mu_);
    auto ready = [&] { return closed_ || items_.size() < capacity_; };
    if (!wait(not_full_, lock, ready, timeout)) return QueueStatus::kTimeout;
    if (closed_) return QueueStatus::kClosed;
    items_.push_back(std::move(value));
    not_empty_.notify_one();
    return QueueStatus::kOk;
  }

  // kOk with `out` set; kClosed once closed and drained; kTimeout.
  QueueStatus dequeue(T& out, Timeout timeout = std::nullopt) {
    std::unique_lock lock(mu_);
    auto ready = [&] { return closed_ || !items_.empty(); };
    ++waiting_consumers_;
    const bool woke = wait(not_empty_, lock, ready, timeout);
    --waiting_consumers_;
    if (!woke) return QueueStatus::kTimeout;
    if (items_.empty()) return QueueStatus::kClosed;
    out = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return QueueStatus::kOk;
  }

  void close() {
    std::lock_guard lock(mu_);
    closed_ = true;
    not_empty_.notify_all();
    not_full_.notify_all();
  }

  std::size_t size() const {
    std::lock_guard lock(mu_);
    return items_.size();
  }
  std::size_t capacity() const { return capacity_; }
  // Consumers inside dequeue() right now (blocked or about to return); for tests and diagnostics.
  std::size_t waiting_consumers() const {
    std::lock_guard lock(mu_);
    return waiting_consumers_;
  }
  bool closed() const {
    std::lock_guard lock(mu_);
    return closed_;
  }

 private:
  template <class Pred>
  static bool wait(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, Pred ready, Timeout timeout) {
    if (!timeout) {
      cv.wait(lock, ready);
      return true;
    }
    return cv.wait_for(lock, *timeout, ready);
  }

  const std::size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable not_empty_;
  std::condition_variable not_full_;
  std::deque<T> items_ TCTL_GUARDED_BY(mu_);
  bool closed_ TCTL_GUARDED_BY(mu_) = false;
  std::size_t waiting_consumers_ TCTL_GUARDED_BY(mu_) = 0;
};

}  // namespace tctl
