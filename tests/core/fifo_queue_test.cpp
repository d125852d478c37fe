#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "core/fifo_queue.h"

using namespace tctl;
using namespace std::chrono_literals;

TEST_CASE("items come out in order, and a full queue times out") {
  FIFOQueue<int> q(2);
  CHECK(q.enqueue(1) == QueueStatus::kOk);
  CHECK(q.enqueue(2) == QueueStatus::kOk);
  CHECK(q.size() == 2);
  CHECK(q.enqueue(3, 1ms) == QueueStatus::kTimeout);
  int v = 0;
  CHECK(q.dequeue(v) == QueueStatus::kOk);
  CHECK(v == 1);
  CHECK(q.dequeue(v) == QueueStatus::kOk);
  CHECK(v == 2);
  CHECK(q.dequeue(v, 1ms) == QueueStatus::kTimeout);
}

TEST_CASE("many producers and consumers: every item arrives exactly once") {
  FIFOQueue<int> q(4);
  const int producers = 3, per_producer = 2000;
  std::vector<std::atomic<int>> seen(producers * per_producer);
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p)
    threads.emplace_back([&, p] {
      for (int i = 0; i < per_producer; ++i) REQUIRE(q.enqueue(p * per_producer + i) == QueueStatus::kOk);
    });
  std::vector<std::thread> consumers;
  for (int c = 0; c < 3; ++c)
    consumers.emplace_back([&] {
      int v;
      while (q.dequeue(v) == QueueStatus::kOk) seen[static_cast<std::size_t>(v)].fetch_add(1);
    });
  for (auto& t : threads) t.join();
  q.close();
  for (auto& t : consumers) t.join();
  for (auto& s : seen) CHECK(s.load() == 1);
}

TEST_CASE("close() wakes blocked consumers and producers; queued items still drain") {
  FIFOQueue<int> q(1);
  std::atomic<int> closed_seen{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 3; ++i)
    waiters.emplace_back([&] {
      int v;
      if (q.dequeue(v) == QueueStatus::kClosed) closed_seen.fetch_add(1);
    });
  // Once all three are blocked on the empty queue, close() must release them.
  while (q.waiting_consumers() < 3) std::this_thread::yield();
  q.close();
  for (auto& t : waiters) t.join();
  CHECK(closed_seen == 3);
  CHECK(q.enqueue(5) == QueueStatus::kClosed);

  FIFOQueue<int> q2(1);
  REQUIRE(q2.enqueue(7) == QueueStatus::kOk);
  std::thread producer([&] { CHECK(q2.enqueue(8) == QueueStatus::kClosed); });  // blocks: the queue is full
  q2.close();
  producer.join();
  int v = 0;
  CHECK(q2.dequeue(v) == QueueStatus::kOk);
  CHECK(v == 7);
  CHECK(q2.dequeue(v) == QueueStatus::kClosed);
}
