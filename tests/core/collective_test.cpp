#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "core/collective.h"
#include "core/session.h"

using namespace tctl;
using namespace std::chrono_literals;

namespace {

// Floats over many binary orders of magnitude, so that adding the same products in another order changes
// the bits of some sums (the test checks that it does).
std::vector<float> member_values(int member, int step, std::int64_t n) {
  std::mt19937 rng(static_cast<unsigned>(1000 * step + member));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = std::ldexp(u(rng), static_cast<int>(rng() % 24) - 12);
  return v;
}

// What one replica computes for the products weight_m * x_m: the first, then each next added in `order`.
std::vector<float> ordered_sum(const std::vector<std::vector<float>>& inputs, const std::vector<float>& weights,
                               const std::vector<int>& order) {
  std::vector<float> sum(inputs[0].size());
  for (std::size_t i = 0; i < sum.size(); ++i) {
    float s = weights[order[0]] * inputs[order[0]][i];
    for (std::size_t k = 1; k < order.size(); ++k) s += weights[order[k]] * inputs[order[k]][i];
    sum[i] = s;
  }
  return sum;
}
std::vector<float> member_order_sum(const std::vector<std::vector<float>>& inputs, const std::vector<float>& weights) {
  std::vector<int> order(inputs.size());
  for (std::size_t m = 0; m < order.size(); ++m) order[m] = static_cast<int>(m);
  return ordered_sum(inputs, weights, order);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// One replica as data-parallel training has it: its own graph, pools and session, with all-reduces of one
// group over its own placeholders.
struct Replica {
  explicit Replica(int inter_threads) : inter(inter_threads), intra(1) {}

  // A placeholder of n floats and its all-reduce as `member`, optionally behind a Delay of `delay_ms`
  // (which makes this replica issue it later than its others).
  Output add_all_reduce(std::int64_t group, int member, int instance, std::int64_t n, float weight,
                        double delay_ms = 0.0) {
    Graph::Scope scope(*graph, "dense/kernel/grad", "cpu", Phase::kUpdate);
    Output x = graph->placeholder("x" + std::to_string(instance), DType::kF32, Shape{n});
    inputs.push_back(x);
    if (delay_ms > 0.0) x = graph->add("Delay", {x}, Attrs{{"ms", delay_ms}});
    const Attrs attrs{{"group", group}, {"member", std::int64_t{member}}, {"instance", std::int64_t{instance}}};
    outputs.push_back(graph->add("AllReduce", {x, graph->scalar(weight)}, attrs));
    return outputs.back();
  }

  // Runs every all-reduce once, input k fed with values[k]; returns the outputs' values.
  std::vector<std::vector<float>> run(const std::vector<std::vector<float>>& values) {
    if (!session) session = std::make_unique<Session>(graph, inter, intra);
    std::vector<Feed> feeds;
    for (std::size_t k = 0; k < inputs.size(); ++k)
      feeds.push_back({inputs[k], Tensor::from_floats(graph->spec(inputs[k]).shape, values[k])});
    std::vector<std::vector<float>> out;
    for (const Tensor& t : session->run(feeds, outputs)) out.push_back(t.to_floats());
    return out;
  }

  std::shared_ptr<Graph> graph = std::make_shared<Graph>();
  ThreadPool inter, intra;
  std::unique_ptr<Session> session;
  std::vector<Output> inputs, outputs;
};

// Runs fn(member) for members[k] on a thread each and returns each one's error message ("" when none). A
// watchdog aborts the group after 20 s, so a missing timeout fails the test instead of hanging it.
std::vector<std::string> on_threads(CollectiveGroup& group, const std::vector<int>& members,
                                    const std::function<void(int)>& fn) {
  std::vector<std::string> errors(members.size());
  std::mutex mu;
  std::condition_variable cv;
  std::size_t finished = 0;
  std::vector<std::thread> threads;
  for (std::size_t k = 0; k < members.size(); ++k)
    threads.emplace_back([&, k] {
      try {
        fn(members[k]);
      } catch (const std::exception& e) {
        errors[k] = e.what();
      }
      std::lock_guard lock(mu);
      ++finished;
      cv.notify_all();
    });
  {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, 20s, [&] { return finished == members.size(); }))
      group.abort("the test's watchdog: members still waiting after 20 s");
  }
  for (auto& t : threads) t.join();
  return errors;
}

std::vector<int> all_members(int n) {
  std::vector<int> m(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) m[static_cast<std::size_t>(i)] = i;
  return m;
}

}  // namespace

TEST_CASE("every member gets the same bits: the weighted sum in member order, as one replica adds it") {
  constexpr std::int64_t n = 4096;
  for (int members : {1, 2, 3}) {
    CAPTURE(members);
    const auto group = CollectiveGroup::create(members);
    const std::vector<float> weights(static_cast<std::size_t>(members), 1.0f / static_cast<float>(members));
    std::vector<std::unique_ptr<Replica>> replicas;
    std::vector<std::vector<float>> inputs;
    for (int m = 0; m < members; ++m) {
      replicas.push_back(std::make_unique<Replica>(2));
      replicas.back()->add_all_reduce(group->id(), m, 0, n, weights[static_cast<std::size_t>(m)]);
      inputs.push_back(member_values(m, 0, n));
    }
    std::vector<std::vector<float>> got(static_cast<std::size_t>(members));
    const auto errors = on_threads(*group, all_members(members), [&](int m) {
      got[static_cast<std::size_t>(m)] =
          replicas[static_cast<std::size_t>(m)]->run({inputs[static_cast<std::size_t>(m)]})[0];
    });
    const std::vector<float> expected = member_order_sum(inputs, weights);
    for (int m = 0; m < members; ++m) {
      CAPTURE(m);
      CHECK(errors[static_cast<std::size_t>(m)] == "");
      CHECK(same_bits(got[static_cast<std::size_t>(m)], expected));
    }
    // The values tell orders apart: summed last member first, some sums differ.
    if (members == 3) CHECK(!same_bits(ordered_sum(inputs, weights, {2, 1, 0}), expected));
    CHECK(group->in_flight() == 0);
  }
}

TEST_CASE("all_reduce may write its result over its own input") {
  constexpr std::int64_t n = 1000;
  const auto group = CollectiveGroup::create(3);
  const std::vector<float> weights{0.25f, 0.5f, 0.25f};
  std::vector<std::vector<float>> inputs, buffers;
  for (int m = 0; m < 3; ++m) inputs.push_back(member_values(m, 7, n));
  buffers = inputs;
  const auto errors = on_threads(*group, all_members(3), [&](int m) {
    float* data = buffers[static_cast<std::size_t>(m)].data();
    group->all_reduce(m, collective_key(7, 0), data, n, weights[static_cast<std::size_t>(m)], data, "in place");
  });
  const std::vector<float> expected = member_order_sum(inputs, weights);
  for (int m = 0; m < 3; ++m) {
    CHECK(errors[static_cast<std::size_t>(m)] == "");
    CHECK(same_bits(buffers[static_cast<std::size_t>(m)], expected));
  }
}

TEST_CASE("many steps in a row, two all-reduces per step issued in opposite orders by neighbouring members") {
  constexpr int members = 3, steps = 40;
  constexpr std::int64_t n0 = 1 << 16, n1 = 77;
  // Shares of a batch of 64 split 22 + 21 + 21.
  const std::vector<float> weights{22.0f / 64, 21.0f / 64, 21.0f / 64};
  const auto group = CollectiveGroup::create(members);
  std::vector<std::unique_ptr<Replica>> replicas;
  for (int m = 0; m < members; ++m) {
    // Two inter-op threads each, so a member can wait in one all-reduce while it issues the other.
    replicas.push_back(std::make_unique<Replica>(2));
    const float w = weights[static_cast<std::size_t>(m)];
    replicas.back()->add_all_reduce(group->id(), m, 0, n0, w, m % 2 == 1 ? 0.2 : 0.0);
    replicas.back()->add_all_reduce(group->id(), m, 1, n1, w, m % 2 == 0 ? 0.2 : 0.0);
  }
  // Made before the threads start, so the members spend their time in the all-reduces.
  std::vector<std::vector<std::vector<float>>> values(steps);  // [step][member * 2 + instance]
  std::vector<std::vector<float>> expected;                    // [step * 2 + instance]
  for (int step = 0; step < steps; ++step) {
    for (int m = 0; m < members; ++m)
      for (int k = 0; k < 2; ++k) values[step].push_back(member_values(m, 2 * step + k, k == 0 ? n0 : n1));
    for (int k = 0; k < 2; ++k)
      expected.push_back(member_order_sum({values[step][k], values[step][2 + k], values[step][4 + k]}, weights));
  }
  std::vector<int> wrong(members, 0);
  const auto errors = on_threads(*group, all_members(members), [&](int m) {
    for (int step = 0; step < steps; ++step) {
      const auto& mine = values[static_cast<std::size_t>(step)];
      const auto got = replicas[static_cast<std::size_t>(m)]->run({mine[2 * m], mine[2 * m + 1]});
      for (int k = 0; k < 2; ++k)
        if (!same_bits(got[static_cast<std::size_t>(k)], expected[static_cast<std::size_t>(2 * step + k)]))
          ++wrong[static_cast<std::size_t>(m)];
    }
  });
  for (int m = 0; m < members; ++m) {
    CAPTURE(m);
    CHECK(errors[static_cast<std::size_t>(m)] == "");
    CHECK(wrong[static_cast<std::size_t>(m)] == 0);
  }
  CHECK(group->in_flight() == 0);
  CHECK_FALSE(group->aborted());
}

TEST_CASE("a member that never arrives makes the others throw, naming it, instead of hanging") {
  const auto group = CollectiveGroup::create(3, 0.2s);
  std::vector<std::unique_ptr<Replica>> replicas;
  for (int m = 0; m < 3; ++m) {
    replicas.push_back(std::make_unique<Replica>(1));
    replicas.back()->add_all_reduce(group->id(), m, 0, 8, 1.0f / 3);
  }
  auto run = [&](int m) { replicas[static_cast<std::size_t>(m)]->run({member_values(m, 0, 8)}); };
  const auto errors = on_threads(*group, {0, 2}, run);
  for (const std::string& e : errors)
    CHECK(e == "all-reduce of dense/kernel/grad/AllReduce at step 0: replica 1 of 3 did not arrive within 0.2 s");
  CHECK(group->aborted());
  // The late member fails at once: the run it belonged to has failed.
  CHECK_THROWS_WITH_AS(run(1),
                       "all-reduce of dense/kernel/grad/AllReduce at step 0: the group was aborted: all-reduce of "
                       "dense/kernel/grad/AllReduce at step 0: replica 1 of 3 did not arrive within 0.2 s",
                       RuntimeError);
  CHECK(group->in_flight() == 0);
}

TEST_CASE("members issuing in opposite orders on one inter-op thread time out rather than hang") {
  const auto group = CollectiveGroup::create(2, 0.2s);
  std::vector<std::unique_ptr<Replica>> replicas;
  for (int m = 0; m < 2; ++m) {
    replicas.push_back(std::make_unique<Replica>(1));
    // Member 0 issues instance 0 first, member 1 instance 1 first: the later one waits on the earlier.
    const int first = m, second = 1 - m;
    const Output a = replicas.back()->add_all_reduce(group->id(), m, first, 8, 0.5f);
    const Output b = replicas.back()->add_all_reduce(group->id(), m, second, 8, 0.5f);
    replicas.back()->graph->add_control_input(b.node, a.node);
  }
  const auto errors = on_threads(*group, {0, 1}, [&](int m) {
    replicas[static_cast<std::size_t>(m)]->run({member_values(m, 0, 8), member_values(m, 1, 8)});
  });
  for (const std::string& e : errors) CHECK(e.find("of 2 did not arrive within 0.2 s") != std::string::npos);
}

TEST_CASE("abort() releases waiting members with its reason") {
  const auto group = CollectiveGroup::create(2);
  Replica replica(1);
  replica.add_all_reduce(group->id(), 0, 0, 8, 0.5f);
  std::thread aborter([&] {
    while (group->in_flight() == 0) std::this_thread::yield();
    group->abort("replica 1 failed: a gradient holds NaN");
  });
  const auto errors = on_threads(*group, {0}, [&](int) { replica.run({member_values(0, 0, 8)}); });
  aborter.join();
  CHECK(errors[0] ==
        "all-reduce of dense/kernel/grad/AllReduce at step 0: the group was aborted: replica 1 "
        "failed: a gradient holds NaN");
}

TEST_CASE("members bringing different sizes both fail") {
  const auto group = CollectiveGroup::create(2, 5s);
  std::vector<std::unique_ptr<Replica>> replicas;
  for (int m = 0; m < 2; ++m) {
    replicas.push_back(std::make_unique<Replica>(1));
    replicas.back()->add_all_reduce(group->id(), m, 0, 8 + m, 0.5f);
  }
  const auto errors = on_threads(
      *group, {0, 1}, [&](int m) { replicas[static_cast<std::size_t>(m)]->run({member_values(m, 0, 8 + m)}); });
  for (const std::string& e : errors) CHECK(e.find("elements, another") != std::string::npos);
}

TEST_CASE("the registry finds live groups only, and a dropped group leaves it") {
  const std::size_t before = CollectiveGroup::registered();
  auto a = CollectiveGroup::create(2);
  auto b = CollectiveGroup::create(1);
  CHECK(a->id() != b->id());
  CHECK(CollectiveGroup::registered() == before + 2);
  CHECK(CollectiveGroup::find(a->id()) == a);
  const std::int64_t dropped = b->id();
  Replica replica(1);
  replica.add_all_reduce(dropped, 0, 0, 4, 1.0f);
  CHECK(replica.run({{1, 2, 3, 4}})[0] == std::vector<float>{1, 2, 3, 4});
  b.reset();
  CHECK(CollectiveGroup::find(dropped) == nullptr);
  CHECK(CollectiveGroup::registered() == before + 1);
  CHECK_THROWS_WITH_AS(replica.run({{1, 2, 3, 4}}),
                       ("all-reduce of dense/kernel/grad/AllReduce at step 1: collective group " +
                        std::to_string(dropped) + " does not exist (never created, or dropped by its owner)")
                           .c_str(),
                       RuntimeError);
  a.reset();
  CHECK(CollectiveGroup::registered() == before);
}

TEST_CASE("AllReduce checks its inputs and attributes where the graph is built, and its member where it runs") {
  const auto group = CollectiveGroup::create(2);
  Graph g;
  const Output x = g.placeholder("x", DType::kF32, Shape{4});
  const Attrs attrs{{"group", group->id()}, {"member", std::int64_t{0}}, {"instance", std::int64_t{0}}};
  CHECK_THROWS_AS(g.add("AllReduce", {x, g.constant(Tensor::filled(Shape{2}, 0.5f))}, attrs), ShapeError);
  CHECK_THROWS_AS(g.add("AllReduce", {x, g.scalar(0.5f)}, Attrs{{"group", group->id()}}), ShapeError);
  CHECK_THROWS_AS(g.add("AllReduce", {x, g.scalar(0.5f)},
                        Attrs{{"group", group->id()}, {"member", std::int64_t{0}}, {"instance", std::int64_t{-1}}}),
                  ShapeError);
  CHECK(!static_cast<bool>(op_def("AllReduce").grad));
  Replica replica(1);
  replica.add_all_reduce(group->id(), 2, 0, 4, 0.5f);
  CHECK_THROWS_WITH_AS(replica.run({{1, 2, 3, 4}}),
                       "all-reduce of dense/kernel/grad/AllReduce at step 0: member 2 of a group of 2", RuntimeError);
}
