#include <doctest/doctest.h>

#include <atomic>
#include <vector>

#include "core/errors.h"
#include "core/thread_pool.h"

using namespace tctl;

TEST_CASE("parallel_for covers every index exactly once") {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    CHECK(pool.size() == threads);
    for (std::int64_t n : {0, 1, 7, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
      pool.parallel_for(n, 3, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)].fetch_add(1);
      });
      for (auto& h : hits) CHECK(h.load() == 1);
    }
  }
}

TEST_CASE("an exception inside parallel_for reaches the caller") {
  ThreadPool pool(2);
  CHECK_THROWS_AS(pool.parallel_for(100, 1,
                                    [](std::int64_t b, std::int64_t) {
                                      if (b > 0) throw RuntimeError("boom");
                                    }),
                  RuntimeError);
  std::atomic<int> after{0};
  pool.parallel_for(10, 1, [&](std::int64_t b, std::int64_t e) { after.fetch_add(static_cast<int>(e - b)); });
  CHECK(after == 10);
}

TEST_CASE("scheduled tasks all run before the pool is destroyed") {
  std::atomic<int> ran{0};
  {
    ThreadPool pool(3);
    for (int i = 0; i < 100; ++i) pool.schedule([&] { ran.fetch_add(1); });
    while (ran.load() < 100) std::this_thread::yield();
  }
  CHECK(ran == 100);
}
