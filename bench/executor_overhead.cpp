// Executor overhead per node (issue 4): Session::run on graphs of about 1,000 trivial nodes, each a Scale or
// an AddN on a 1-element tensor, so what is measured is scheduling, not arithmetic. Two shapes:
//   chain  x -> Scale -> Scale -> ... (1,000 deep): every node frees exactly one successor.
//   wide   1,000 independent Scales of x, summed by an AddN tree of fan-in 10 (100 + 10 + 1 nodes).
// Each runs with 1 inter-op thread (every node inline on the caller) and with 2 (extra ready nodes handed
// to the pool), with the profiler off and on. Prints microseconds per plan node, median of 9 repetitions,
// and the ratio to the goal: under 1 us per node on one thread.
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/profiler.h"
#include "core/session.h"

namespace {

using namespace tctl;

constexpr int kNodes = 1000;
constexpr double kGoalUs = 1.0;

struct Bench {
  std::string name;
  std::shared_ptr<Graph> graph;
  Output x;
  Output result;
};

Bench make_chain() {
  Bench b{"chain", std::make_shared<Graph>(), {}, {}};
  b.x = b.graph->placeholder("x", DType::kF32, Shape{1});
  Output y = b.x;
  for (int i = 0; i < kNodes; ++i) y = b.graph->add("Scale", {y}, Attrs{{"factor", 1.0}});
  b.result = y;
  return b;
}

Bench make_wide() {
  Bench b{"wide", std::make_shared<Graph>(), {}, {}};
  b.x = b.graph->placeholder("x", DType::kF32, Shape{1});
  std::vector<Output> level;
  for (int i = 0; i < kNodes; ++i) level.push_back(b.graph->add("Scale", {b.x}, Attrs{{"factor", 1.0}}));
  while (level.size() > 1) {
    std::vector<Output> next;
    for (std::size_t i = 0; i < level.size(); i += 10) {
      std::vector<Output> group(level.begin() + static_cast<std::ptrdiff_t>(i),
                                level.begin() + static_cast<std::ptrdiff_t>(std::min(i + 10, level.size())));
      next.push_back(b.graph->add("AddN", group));
    }
    level = std::move(next);
  }
  b.result = level[0];
  return b;
}

// Microseconds per plan node (the fed placeholder included), median of 9 timed repetitions after a warm-up.
double us_per_node(const Bench& b, int inter_threads, bool profile) {
  ThreadPool inter(inter_threads), intra(1);
  Session session(b.graph, inter, intra);
  std::vector<Feed> feeds{{b.x, Tensor::filled(Shape{1}, 1.0f)}};
  std::vector<Output> fetches{b.result};
  Profiler profiler;
  RunOptions options;
  if (profile) options.profiler = &profiler;
  const int runs_per_rep = 200;
  std::vector<double> reps;
  for (int r = 0; r < 10; ++r) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < runs_per_rep; ++i) session.run(feeds, fetches, {}, options);
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    // The profiler keeps every event; drop them between repetitions so memory stays flat.
    profiler.clear();
    if (r > 0) reps.push_back(us / runs_per_rep / static_cast<double>(b.graph->size()));
  }
  std::sort(reps.begin(), reps.end());
  return reps[reps.size() / 2];
}

}  // namespace

int main() {
  std::vector<Bench> benches{make_chain(), make_wide()};
  fmt::print("executor overhead per node, Session::run, 1-element tensors (median of 9)\n");
  fmt::print("{:<8} {:>6} {:>10} {:>14} {:>12} {:>14}\n", "graph", "nodes", "inter-op", "us/node off", "x goal 1us",
             "us/node prof");
  for (const Bench& b : benches) {
    for (int threads : {1, 2}) {
      double off = us_per_node(b, threads, false);
      double on = us_per_node(b, threads, true);
      fmt::print("{:<8} {:>6} {:>10} {:>14.3f} {:>12.2f} {:>14.3f}   (profiler +{:.3f} us/node)\n", b.name,
                 b.graph->size(), threads, off, off / kGoalUs, on, on - off);
    }
  }
  return 0;
}
