#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include "models/train/metric_accumulator.h"

using namespace tctl;

TEST_CASE("averages per example, loss first") {
  MetricAccumulator acc;
  acc.add({.loss = 2.0, .correct = 1.0, .examples = 2});
  acc.add({.loss = 1.0, .correct = 2.0, .examples = 2});
  MetricValues v = acc.averages({"accuracy"});
  REQUIRE(v.size() == 2);
  CHECK(v[0].first == "loss");
  CHECK(v[0].second == doctest::Approx(0.75));
  CHECK(v[1].second == doctest::Approx(0.75));
}

TEST_CASE("several threads adding at once lose nothing") {
  MetricAccumulator acc;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 5000; ++i) acc.add({.loss = 1.0, .abs_error = 2.0, .examples = 1, .values = 1});
    });
  for (auto& t : threads) t.join();
  CHECK(acc.examples() == 20000);
  MetricValues v = acc.averages({"mae"});
  CHECK(v[0].second == 1.0);
  CHECK(v[1].second == 2.0);
}
