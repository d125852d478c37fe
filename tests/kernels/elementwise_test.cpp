#include "kernels/op_test_util.h"

using namespace tctl;
using tctl::testing::check_op;
using tctl::testing::OpCheck;
using tctl::testing::random_tensor;
using tctl::testing::run_op;

TEST_CASE("elementwise gradients") {
  check_op("Add", {{4, 3}, {4, 3}});
  check_op("Sub", {{4, 3}, {4, 3}});
  check_op("Mul", {{4, 3}, {4, 3}});
  check_op("Scale", {{4, 3}}, OpCheck{.attrs = Attrs{{"factor", -2.5}}});
  check_op("AddN", {{2, 3}, {2, 3}, {2, 3}});
  check_op("BiasAdd", {{5, 3}, {3}});
}

TEST_CASE("BiasAdd adds the bias to every row and BiasAddGrad sums columns") {
  Tensor x = Tensor::from_floats(Shape{2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  Tensor b = Tensor::from_floats(Shape{3}, std::vector<float>{10, 20, 30});
  CHECK(run_op("BiasAdd", {x, b}, {}).to_floats() == std::vector<float>{11, 22, 33, 14, 25, 36});
  CHECK(run_op("BiasAddGrad", {x}, {}).to_floats() == std::vector<float>{5, 7, 9});
}

TEST_CASE("large elementwise kernels give the same bits on 1 and 2 intra-op threads") {
  Tensor a = random_tensor(Shape{300, 257}, 5), b = random_tensor(Shape{300, 257}, 6);
  Tensor one = run_op("Mul", {a, b}, {}, 1), two = run_op("Mul", {a, b}, {}, 2);
  CHECK(std::memcmp(one.raw_data(), two.raw_data(), one.bytes()) == 0);
  Tensor s1 = run_op("BiasAddGrad", {a}, {}, 1), s2 = run_op("BiasAddGrad", {a}, {}, 2);
  CHECK(std::memcmp(s1.raw_data(), s2.raw_data(), s1.bytes()) == 0);
  // 257 columns: four blocks of 64 and one left over; each column adds its rows first to last.
  std::vector<float> expected(257, 0.0f);
  const float* pa = a.data<float>();
  for (int r = 0; r < 300; ++r)
    for (int j = 0; j < 257; ++j) expected[static_cast<std::size_t>(j)] += pa[r * 257 + j];
  CHECK(s1.to_floats() == expected);
}

TEST_CASE(
    "BiasAddGrad of tall and wide gradients on the test device: as close to the exact sums, the same bits twice") {
  // 70,000 rows take three passes of tile sums on a GPU (274 tiles, then 2, then 1); 1,000 x 300 one pass of
  // 4 tiles and then one; 3 x 5 a single tile. The device's tree is compared with the exact (double) column
  // sums: no further from them than the CPU's first-to-last float sum, plus the stated 1e-5 (at 70,000 rows
  // the CPU's own rounding is the larger part: 5e-4 on a sum of 24 in one column, measured on an H200).
  if (!tctl::testing::runs_on_test_device("BiasAddGrad")) return;  // the CPU alone: nothing to compare
  for (const Shape& shape : {Shape{70000, 16}, Shape{1000, 300}, Shape{3, 5}}) {
    CAPTURE(shape.to_string());
    const Tensor a = random_tensor(shape, 7);
    const std::int64_t cols = shape[1];
    std::vector<double> exact(static_cast<std::size_t>(cols), 0.0);
    const float* pa = a.data<float>();
    for (std::int64_t i = 0; i < a.num_elements(); ++i) exact[static_cast<std::size_t>(i % cols)] += pa[i];
    const std::vector<float> cpu = run_op("BiasAddGrad", {a}, {}).to_floats();
    const std::vector<float> one = run_op("BiasAddGrad", {a}, {}, 1, tctl::testing::test_device()).to_floats();
    const std::vector<float> two = run_op("BiasAddGrad", {a}, {}, 1, tctl::testing::test_device()).to_floats();
    CHECK(one == two);
    for (std::size_t j = 0; j < exact.size(); ++j) {
      CAPTURE(j);
      CHECK(std::abs(one[j] - exact[j]) <= std::abs(cpu[j] - exact[j]) + 1e-5 * (1.0 + std::abs(exact[j])));
    }
  }
}

TEST_CASE("shape mismatch in elementwise ops is refused") {
  Graph g;
  Output a = g.placeholder("a", DType::kF32, Shape{2, 3});
  Output b = g.placeholder("b", DType::kF32, Shape{3, 2});
  CHECK_THROWS_AS(g.add("Add", {a, b}), ShapeError);
}
