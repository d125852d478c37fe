// BatchNorm and its statistics ops: finite differences through the shared harness, values, the moving
// average update and shape errors.
#include "kernels/op_test_util.h"

using namespace tctl;
using tctl::testing::check_op;
using tctl::testing::check_op_inputs;
using tctl::testing::OpCheck;
using tctl::testing::random_tensor;
using tctl::testing::run_op;

TEST_CASE("BatchNorm gradients with respect to x, mean, variance, gamma and beta") {
  // The variance must be positive: random values in [0.5, 1.5].
  auto positive = [](const Shape& s, std::uint64_t seed) {
    std::vector<float> v = random_tensor(s, seed).to_floats();
    for (auto& x : v) x = 1.0f + 0.5f * x;
    return Tensor::from_floats(s, v);
  };
  const Attrs eps{{"epsilon", 1e-3}};
  check_op_inputs("BatchNorm",
                  {random_tensor(Shape{4, 3}, 1), random_tensor(Shape{3}, 2), positive(Shape{3}, 3),
                   random_tensor(Shape{3}, 4), random_tensor(Shape{3}, 5)},
                  OpCheck{.attrs = eps});
  check_op_inputs("BatchNorm",
                  {random_tensor(Shape{2, 3, 2, 2}, 6), random_tensor(Shape{2}, 7), positive(Shape{2}, 8),
                   random_tensor(Shape{2}, 9), random_tensor(Shape{2}, 10)},
                  OpCheck{.attrs = eps});
  check_op("BatchNormMean", {{5, 3}});
  check_op("BatchNormMean", {{2, 3, 4}});
  check_op("BatchNormVariance", {{5, 3}});
  check_op("BatchNormVariance", {{3, 2, 2}});
}

TEST_CASE("BatchNormMean and BatchNormVariance reduce every axis but the last") {
  // Channel 0: 1, 3, 5, 7 (mean 4, variance 5); channel 1: 2, 2, 2, 2.
  Tensor x = Tensor::from_floats(Shape{2, 2, 2}, std::vector<float>{1, 2, 3, 2, 5, 2, 7, 2});
  CHECK(run_op("BatchNormMean", {x}, {}).to_floats() == std::vector<float>{4, 2});
  CHECK(run_op("BatchNormVariance", {x}, {}).to_floats() == std::vector<float>{5, 0});
  // A large offset does not swamp a small variance (two passes).
  Tensor shifted = Tensor::from_floats(Shape{2, 1}, std::vector<float>{10000.0f, 10002.0f});
  CHECK(run_op("BatchNormVariance", {shifted}, {}).to_floats()[0] == doctest::Approx(1.0));
}

TEST_CASE("BatchNorm statistics give identical bits on 1 and 2 threads for wide inputs") {
  Tensor x = random_tensor(Shape{300, 200}, 3);
  for (const std::string op : {"BatchNormMean", "BatchNormVariance"}) {
    Tensor one = run_op(op, {x}, {}, 1), two = run_op(op, {x}, {}, 2);
    CHECK(one.to_floats() == two.to_floats());
  }
}

TEST_CASE("AssignMovingAverage moves the variable toward its input by 1 - momentum") {
  auto var = std::make_shared<Variable>("v", Tensor::from_floats(Shape{2}, std::vector<float>{1, 10}));
  auto g = std::make_shared<Graph>();
  Output value = g->constant(Tensor::from_floats(Shape{2}, std::vector<float>{3, 0}));
  Output update = g->add("AssignMovingAverage", {value}, Attrs{{"momentum", 0.75}}, {{var, true}});
  ThreadPool inter(1), intra(1);
  Session s(g, inter, intra);
  std::vector<Output> targets{update};
  s.run({}, {}, targets);
  CHECK(var->read().to_floats() == std::vector<float>{1.5f, 7.5f});
}

TEST_CASE("BatchNorm refuses statistics that do not match the channels, naming the node") {
  Graph g;
  Output x = g.placeholder("x", DType::kF32, Shape{-1, 4});
  Output c4 = g.placeholder("c4", DType::kF32, Shape{4});
  Output c3 = g.placeholder("c3", DType::kF32, Shape{3});
  try {
    g.add("BatchNorm", {x, c4, c3, c4, c4}, Attrs{{"epsilon", 1e-3}});
    FAIL("expected a ShapeError");
  } catch (const ShapeError& e) {
    const std::string m = e.what();
    CHECK(m.find("BatchNorm") != std::string::npos);
    CHECK(m.find("input 2 has shape [3] but the input [?, 4] has 4 channels") != std::string::npos);
  }
  CHECK_THROWS_AS(g.add("BatchNormMean", {c4}), ShapeError);
}

TEST_CASE("the masked moments take the kept steps only, as Keras 3's, and their gradients check") {
  // x [2, 3, 2]: row 0 keeps steps 0 and 1, row 1 step 1. The padding steps hold 1000, which any leak shows.
  const Tensor mask = Tensor::from_floats(Shape{2, 3}, std::vector<float>{1, 1, 0, 0, 1, 0});
  const Tensor x =
      Tensor::from_floats(Shape{2, 3, 2}, std::vector<float>{1, 2, 3, 2, 1000, 1000, 1000, 1000, 8, 2, 1000, 1000});
  // Channel 0 keeps 1, 3, 8; channel 1 keeps 2, 2, 2. Keras divides by the kept count plus 1e-7.
  const double kept = 3 + 1e-7;
  const std::vector<float> mean = run_op("BatchNormMaskedMean", {x, mask}, {}).to_floats();
  CHECK(mean[0] == doctest::Approx(12 / kept).epsilon(1e-7));
  CHECK(mean[1] == doctest::Approx(6 / kept).epsilon(1e-7));
  const std::vector<float> variance = run_op("BatchNormMaskedVariance", {x, mask}, {}).to_floats();
  const double m0 = 12 / kept, m1 = 6 / kept;
  CHECK(variance[0] ==
        doctest::Approx(((1 - m0) * (1 - m0) + (3 - m0) * (3 - m0) + (8 - m0) * (8 - m0)) / kept).epsilon(1e-6));
  CHECK(variance[1] == doctest::Approx(3 * (2 - m1) * (2 - m1) / kept));
  // All padding: zeros, as Keras' sums over nothing divided by its epsilon.
  const Tensor none = Tensor::zeros(DType::kF32, Shape{2, 3});
  CHECK(run_op("BatchNormMaskedMean", {x, none}, {}).to_floats() == std::vector<float>{0, 0});
  CHECK(run_op("BatchNormMaskedVariance", {x, none}, {}).to_floats() == std::vector<float>{0, 0});

  // Finite differences (a padding element gets no gradient), and the same bits on 1 and 2 threads.
  const Tensor kMask = Tensor::from_floats(Shape{3, 4}, std::vector<float>{1, 1, 0, 1, 0, 1, 0, 0, 0, 1, 1, 0});
  for (const char* op : {"BatchNormMaskedMean", "BatchNormMaskedVariance"}) {
    check_op_inputs(op, {random_tensor(Shape{3, 4, 5}, 21), kMask}, {.constant_inputs = {1}});
    const Tensor wide = random_tensor(Shape{40, 30, 200}, 22);
    std::vector<float> thirds(1200, 1.0f);
    for (std::size_t i = 0; i < thirds.size(); i += 3) thirds[i] = 0.0f;
    const Tensor mask_wide = Tensor::from_floats(Shape{40, 30}, thirds);
    CHECK(run_op(op, {wide, mask_wide}, {}, 1).to_floats() == run_op(op, {wide, mask_wide}, {}, 2).to_floats());
  }
}

TEST_CASE("the masked moments refuse a mask that does not fit the input without its channels") {
  Graph g;
  const Output x = g.placeholder("x", DType::kF32, Shape{-1, 3, 2});
  CHECK_NOTHROW(g.add("BatchNormMaskedMean", {x, g.placeholder("m", DType::kF32, Shape{-1, 3})}));
  try {
    g.add("BatchNormMaskedVariance", {x, g.placeholder("m4", DType::kF32, Shape{-1, 4})});
    FAIL("expected a ShapeError");
  } catch (const ShapeError& e) {
    CHECK(std::string(e.what()).find("mask [?, 4] does not fit [?, 3, 2] without its channel axis") !=
          std::string::npos);
  }
}
