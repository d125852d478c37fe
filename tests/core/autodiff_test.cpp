#include <doctest/doctest.h>

#include <algorithm>

#include "core/autodiff.h"
#include "core/session.h"

using namespace tctl;

namespace {
bool has_control(const Graph& g, Output node, Output dep) {
  const auto& c = g.node(node).control_inputs;
  return std::find(c.begin(), c.end(), dep.node) != c.end();
}
}  // namespace

TEST_CASE("gradient of sum(x * x + x) is 2x + 1, with paths summed") {
  auto g = std::make_shared<Graph>();
  Output x = g->placeholder("x", DType::kF32, Shape{3});
  Output y = g->add("Sum", {g->add("Add", {g->add("Mul", {x, x}), x})});
  std::vector<Output> xs{x};
  Output dx = gradients(*g, y, xs)[0];
  CHECK(g->node(dx).phase == Phase::kBackward);
  ThreadPool inter(1), intra(1);
  Session s(g, inter, intra);
  std::vector<Feed> feeds{{x, Tensor::from_floats(Shape{3}, std::vector<float>{1, 2, -3})}};
  std::vector<Output> fetch{dx};
  CHECK(s.run(feeds, fetch)[0].to_floats() == std::vector<float>{3, 5, -5});
}

TEST_CASE("an input the loss does not depend on gets a zero gradient") {
  auto g = std::make_shared<Graph>();
  Output x = g->placeholder("x", DType::kF32, Shape{2});
  Output unused = g->placeholder("u", DType::kF32, Shape{2});
  Output y = g->add("Sum", {x});
  std::vector<Output> xs{unused};
  Output du = gradients(*g, y, xs)[0];
  ThreadPool inter(1), intra(1);
  Session s(g, inter, intra);
  std::vector<Output> fetch{du};
  std::vector<Feed> feeds{{unused, Tensor::filled(Shape{2}, 7.0f)}};
  CHECK(s.run(feeds, fetch)[0].to_floats() == std::vector<float>{0, 0});
}

TEST_CASE("automatic control dependencies order writes after reads and their consumers") {
  Graph g;
  auto w = std::make_shared<Variable>("w", Tensor::zeros(DType::kF32, Shape{2}));
  Output r1 = g.read(w);
  Output use = g.add("Relu", {r1});
  Output r2 = g.read(w);
  Output write = g.add("ApplySgd", {g.constant(Tensor::filled(Shape{2}, 1.0f)), g.scalar(0.1f)}, {}, {{w, true}});
  Output r3 = g.read(w);
  Output write2 = g.add("Increment", {}, Attrs{{"amount", 1.0}}, {{w, true}});

  CHECK(find_unordered_conflicts(g).size() >= 3);
  add_auto_control_dependencies(g);
  CHECK(find_unordered_conflicts(g).empty());
  CHECK(has_control(g, write, r1));
  CHECK(has_control(g, write, r2));
  CHECK(has_control(g, write, use));  // so the write can update in place
  CHECK(has_control(g, r3, write));
  CHECK(has_control(g, write2, write));
  CHECK(has_control(g, write2, r3));
  // Reads between writes stay unordered among themselves.
  CHECK_FALSE(has_control(g, r2, r1));
}

TEST_CASE("a write waits for no superseded consumer of a read while nothing reads that consumer") {
  Graph g;
  auto w = std::make_shared<Variable>("w", Tensor::zeros(DType::kF32, Shape{2}));
  Output r = g.read(w);
  Output dead = g.add("Relu", {r});     // a fused op took over from it, and nothing reads it
  Output read_on = g.add("Relu", {r});  // superseded too, but a later node reads it
  Output live = g.add("ZerosLike", {read_on});
  g.supersede(dead.node);
  g.supersede(read_on.node);
  Output write = g.add("Increment", {}, Attrs{{"amount", 1.0}}, {{w, true}});
  add_auto_control_dependencies(g);
  CHECK(has_control(g, write, r));
  CHECK_FALSE(has_control(g, write, dead));
  CHECK(has_control(g, write, read_on));
  CHECK_FALSE(has_control(g, write, live));  // not a consumer of the read
}

TEST_CASE("an unused input with an unknown batch gets zeros of its fed shape") {
  auto g = std::make_shared<Graph>();
  Output x = g->placeholder("x", DType::kF32, Shape{-1, 3});
  Output loss = g->add("Sum", {g->constant(Tensor::filled(Shape{2}, 1.0f))});
  std::vector<Output> xs{x};
  Output dx = gradients(*g, loss, xs)[0];
  ThreadPool inter(1), intra(1);
  Session s(g, inter, intra);
  std::vector<Feed> feeds{{x, Tensor::filled(Shape{2, 3}, 5.0f)}};
  std::vector<Output> fetch{dx};
  CHECK(s.run(feeds, fetch)[0].to_floats() == std::vector<float>(6, 0.0f));
}

TEST_CASE("no gradient is built for an input nothing differentiated depends on (the model's input batch)") {
  Graph g;
  Output x = g.placeholder("x", DType::kF32, Shape{-1, 3});
  auto w = std::make_shared<Variable>("w", Tensor::filled(Shape{3, 2}, 0.5f));
  Output read = g.read(w);
  Output loss = g.add("Sum", {g.add("MatMul", {x, read})});
  std::vector<Output> wrt{read};
  gradients(g, loss, wrt);
  // The forward product and the weight gradient; the input gradient (dy W^T) would be dead work that a later
  // update of w still waited for.
  const auto matmuls =
      std::count_if(g.nodes().begin(), g.nodes().end(), [](const Node& n) { return n.op->name == "MatMul"; });
  CHECK(matmuls == 2);
  // Asking for x's gradient too builds it.
  Graph g2;
  Output x2 = g2.placeholder("x", DType::kF32, Shape{-1, 3});
  Output r2 = g2.read(w);
  Output l2 = g2.add("Sum", {g2.add("MatMul", {x2, r2})});
  std::vector<Output> both{x2, r2};
  gradients(g2, l2, both);
  CHECK(std::count_if(g2.nodes().begin(), g2.nodes().end(), [](const Node& n) { return n.op->name == "MatMul"; }) == 3);
}

TEST_CASE("the gradient of a Concat of thousands of inputs slices each one's part") {
  // The gradient builder adds a slice per input while it reads the Concat node: the node vector grows under
  // it many times (a Parallel layer of 4,500 branches crashed here, reading the moved node).
  auto g = std::make_shared<Graph>();
  Output x = g->placeholder("x", DType::kF32, Shape{1, 1});
  std::vector<Output> parts;
  for (int i = 0; i < 3000; ++i)
    parts.push_back(g->add("Mul", {x, g->constant(Tensor::filled(Shape{1, 1}, static_cast<float>(i % 7)))}));
  Output y = g->add("Sum", {g->add("Concat", parts)});
  std::vector<Output> xs{x};
  Output dx = gradients(*g, y, xs)[0];
  ThreadPool inter(1), intra(1);
  Session s(g, inter, intra);
  std::vector<Feed> feeds{{x, Tensor::from_floats(Shape{1, 1}, std::vector<float>{2})}};
  std::vector<Output> fetch{dx};
  // d/dx of sum_i x * (i mod 7) = sum_i (i mod 7).
  float want = 0;
  for (int i = 0; i < 3000; ++i) want += static_cast<float>(i % 7);
  CHECK(s.run(feeds, fetch)[0].to_floats() == std::vector<float>{want});
}
