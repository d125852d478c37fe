// Eager execution: each op runs the moment it is added to a graph, on the calling thread, and finishes
// before the next one is added, the way a Python loop calls layers one by one. The graph is only a tape
// of what ran: there is no plan, no scheduling and no overlap, and every op allocates its output.
//
// Built in the same order as a traced graph, an eager graph has the same node ids, so random streams (keyed
// by node id and step) and therefore results are the same as the traced run's: the point of the comparison
// in `tensorctl profile --mode both`.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/compute_type.h"
#include "core/errors.h"
#include "core/graph.h"
#include "core/thread_pool.h"

namespace tctl {

class KernelContext;

class Profiler;

struct EagerOptions {
  std::uint64_t seed = 0;  // as SessionOptions::seed
  std::int64_t step = 0;   // as RunOptions::step
  Profiler* profiler = nullptr;
  ComputeType compute_type = ComputeType::kF32;  // as SessionOptions::compute_type
  // Diagnosis of a step gone NaN: after every op, check its float output and throw NonFiniteValue naming the
  // first op whose output holds a NaN or an infinity; update ops are skipped, so variables stay as they are.
  bool find_non_finite = false;
};

// Thrown by an EagerRunner with find_non_finite: the first op that produced a NaN or an infinity.
class NonFiniteValue : public RuntimeError {
 public:
  NonFiniteValue(const Node& node, bool nan);
  std::string op_name;  // the node's name, "dense_1/MatMul"
};

// Runs the nodes of `g` as they are added, from construction until destruction. Placeholders take the
// values given to feed() before they are added; a placeholder without one throws RuntimeError.
class EagerRunner {
 public:
  EagerRunner(Graph& g, ThreadPool& intra, EagerOptions options);
  ~EagerRunner();
  EagerRunner(const EagerRunner&) = delete;
  EagerRunner& operator=(const EagerRunner&) = delete;

  void feed(const std::string& placeholder, Tensor value) { feeds_[placeholder] = std::move(value); }
  // The value a node computed; undefined when the node was skipped (it read a dead value: OpDef::may_skip).
  const Tensor& value(Output o) const { return values_.at(static_cast<std::size_t>(o.node)); }

 private:
  void note_skip(const KernelContext& kc, std::size_t id);
  void run(const Node& node);

  Graph& g_;
  ThreadPool& intra_;
  EagerOptions options_;
  FlushDenormalsScope flush_;
  std::map<std::string, Tensor, std::less<>> feeds_;
  std::vector<Tensor> values_;
  std::vector<char> dead_;  // per node: 1 when its output is dead
};

}  // namespace tctl
