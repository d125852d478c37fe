#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include "models/infer/metrics.h"

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

TEST_CASE("in_top_k: the label counts when fewer than 5 classes score strictly higher, ties in its favour") {
  // Ten classes scored 9, 8, ..., 0: class c has 9 - c classes above it.
  std::vector<float> row(10);
  for (int c = 0; c < 10; ++c) row[static_cast<std::size_t>(c)] = static_cast<float>(c);
  for (int label = 0; label < 10; ++label) {
    CAPTURE(label);
    CHECK(in_top_k(row.data(), 10, label) == (9 - label < kTopK));  // 5th highest in, 6th out
  }
  // Six classes tied at the top: each has none strictly above it.
  const std::vector<float> tied{1, 1, 1, 1, 1, 1, 0, 0};
  for (int label = 0; label < 6; ++label) CHECK(in_top_k(tied.data(), 8, label));
  CHECK_FALSE(in_top_k(tied.data(), 8, 6));
}
