// Concat along the last axis, and the slice / pad pair its gradient is made of.
#include <doctest/doctest.h>

#include "core/errors.h"
#include "kernels/op_test_util.h"

namespace tctl {
namespace {

using testing::check_op;
using testing::run_op;

TEST_CASE("Concat passes the op checks") {
  check_op("Concat", {{4, 3}, {4, 2}});
  check_op("Concat", {{2, 3}, {2, 1}, {2, 5}});
  check_op("Concat", {{5}, {3}});
  check_op("Concat", {{2, 3, 2}, {2, 3, 4}});
}

TEST_CASE("SliceLastAxis and PadLastAxis pass the op checks") {
  testing::OpCheck slice;
  slice.attrs = Attrs{{"begin", std::int64_t{1}}, {"size", std::int64_t{3}}};
  check_op("SliceLastAxis", {{4, 5}}, slice);
  testing::OpCheck pad;
  pad.attrs = Attrs{{"begin", std::int64_t{2}}, {"width", std::int64_t{6}}};
  check_op("PadLastAxis", {{3, 3}}, pad);
}

TEST_CASE("Concat joins rows along the last axis") {
  Tensor a = Tensor::from_floats(Shape{2, 2}, std::vector<float>{1, 2, 3, 4});
  Tensor b = Tensor::from_floats(Shape{2, 1}, std::vector<float>{5, 6});
  Tensor c = Tensor::from_floats(Shape{2, 3}, std::vector<float>{7, 8, 9, 10, 11, 12});
  Tensor y = run_op("Concat", {a, b, c}, {});
  CHECK(y.shape() == Shape{2, 6});
  CHECK(y.to_floats() == std::vector<float>{1, 2, 5, 7, 8, 9, 3, 4, 6, 10, 11, 12});
}

TEST_CASE("SliceLastAxis takes columns and PadLastAxis puts them back among zeros") {
  Tensor x = Tensor::from_floats(Shape{2, 4}, std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
  Tensor s = run_op("SliceLastAxis", {x}, Attrs{{"begin", std::int64_t{1}}, {"size", std::int64_t{2}}});
  CHECK(s.shape() == Shape{2, 2});
  CHECK(s.to_floats() == std::vector<float>{2, 3, 6, 7});
  Tensor p = run_op("PadLastAxis", {s}, Attrs{{"begin", std::int64_t{1}}, {"width", std::int64_t{4}}});
  CHECK(p.to_floats() == std::vector<float>{0, 2, 3, 0, 0, 6, 7, 0});
}

TEST_CASE("Concat gives each input its slice of dy") {
  auto g = std::make_shared<Graph>();
  Output a = g->placeholder("a", DType::kF32, Shape{-1, 2});
  Output b = g->placeholder("b", DType::kF32, Shape{-1, 1});
  Output y = g->add("Concat", {a, b});
  CHECK(g->spec(y).shape == Shape{-1, 3});
  // The gradient of sum(y * r) is r split by columns.
  Output r = g->constant(Tensor::from_floats(Shape{2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6}));
  Output l2 = g->add("Sum", {g->add("Mul", {y, r})});
  std::vector<Output> xs{a, b};
  std::vector<Output> grads = gradients(*g, l2, xs);
  ThreadPool inter(1), intra(1);
  Session s(g, inter, intra);
  std::vector<Feed> feeds{{a, Tensor::from_floats(Shape{2, 2}, std::vector<float>{0, 0, 0, 0})},
                          {b, Tensor::from_floats(Shape{2, 1}, std::vector<float>{0, 0})}};
  auto out = s.run(feeds, grads);
  CHECK(out[0].to_floats() == std::vector<float>{1, 2, 4, 5});
  CHECK(out[1].to_floats() == std::vector<float>{3, 6});
}

TEST_CASE("Concat checks the leading dimensions when the node is added") {
  Graph g;
  Output a = g.placeholder("a", DType::kF32, Shape{3, 2});
  Output b = g.placeholder("b", DType::kF32, Shape{4, 2});
  CHECK_THROWS_AS(g.add("Concat", {a, b}), ShapeError);
  Output c = g.placeholder("c", DType::kF32, Shape{3, 2, 1});
  CHECK_THROWS_AS(g.add("Concat", {a, c}), ShapeError);
  Output u = g.placeholder("u", DType::kF32, Shape{-1, 2});
  CHECK(g.spec(g.add("Concat", {a, u})).shape == Shape{3, 4});
  CHECK_THROWS_AS(g.add("SliceLastAxis", {a}, Attrs{{"begin", std::int64_t{1}}, {"size", std::int64_t{2}}}),
                  ShapeError);
}

}  // namespace
}  // namespace tctl
