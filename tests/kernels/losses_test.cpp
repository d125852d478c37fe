#include "kernels/op_test_util.h"

using namespace tctl;
using tctl::testing::check_op;
using tctl::testing::check_op_inputs;
using tctl::testing::OpCheck;
using tctl::testing::random_tensor;
using tctl::testing::run_op;

TEST_CASE("sparse softmax cross-entropy: gradient and value") {
  Tensor logits = random_tensor(Shape{4, 5}, 3);
  Tensor labels = Tensor::from_ints(Shape{4}, std::vector<std::int32_t>{0, 4, 2, 2});
  check_op_inputs("SparseSoftmaxXent", {logits, labels}, OpCheck{.constant_inputs = {1}});
  auto loss = run_op("SparseSoftmaxXent", {logits, labels}, {}).to_floats();
  for (int r = 0; r < 4; ++r) {
    double sum = 0;
    for (int j = 0; j < 5; ++j) sum += std::exp(static_cast<double>(logits.data<float>()[r * 5 + j]));
    int label = labels.data<std::int32_t>()[r];
    CHECK(loss[r] == doctest::Approx(std::log(sum) - logits.data<float>()[r * 5 + label]).epsilon(1e-5));
  }
}

TEST_CASE("cross-entropy stays finite for extreme logits") {
  Tensor logits = Tensor::from_floats(Shape{1, 3}, std::vector<float>{1e4f, -1e4f, 0.0f});
  Tensor labels = Tensor::from_ints(Shape{1}, std::vector<std::int32_t>{1});
  float l = run_op("SparseSoftmaxXent", {logits, labels}, {}).item();
  CHECK(std::isfinite(l));
  CHECK(l == doctest::Approx(2e4).epsilon(1e-5));
}

TEST_CASE("a label outside the classes is a runtime error, not a crash") {
  Tensor logits = random_tensor(Shape{2, 3}, 3);
  for (const std::int32_t bad : {3, -1}) {
    Tensor labels = Tensor::from_ints(Shape{2}, std::vector<std::int32_t>{0, bad});
    const std::string expected = "label " + std::to_string(bad) + " in row 1 is outside [0, 3)";
    CHECK_THROWS_WITH_AS(run_op("SparseSoftmaxXent", {logits, labels}, {}), doctest::Contains(expected.c_str()),
                         RuntimeError);
  }
}

TEST_CASE("one-hot softmax cross-entropy and MSE gradients") {
  Tensor logits = random_tensor(Shape{3, 4}, 8);
  std::vector<float> onehot(12, 0.0f);
  onehot[1] = onehot[4 + 3] = onehot[8] = 1.0f;
  check_op_inputs("SoftmaxXent", {logits, Tensor::from_floats(Shape{3, 4}, onehot)}, OpCheck{.constant_inputs = {1}});
  check_op_inputs("Mse", {random_tensor(Shape{3, 2}, 9), random_tensor(Shape{3, 2}, 10)},
                  OpCheck{.constant_inputs = {1}});
  auto mse = run_op("Mse",
                    {Tensor::from_floats(Shape{1, 2}, std::vector<float>{1, 3}),
                     Tensor::from_floats(Shape{1, 2}, std::vector<float>{0, 0})},
                    {});
  CHECK(mse.item() == doctest::Approx(5.0));
}

TEST_CASE("mae, huber and binary cross-entropy gradients") {
  check_op_inputs("Mae", {random_tensor(Shape{3, 2}, 11), random_tensor(Shape{3, 2}, 12, 0.3f)},
                  OpCheck{.constant_inputs = {1}});
  // Differences in [-2, 2] cross both sides of delta = 1.
  check_op_inputs("Huber", {random_tensor(Shape{4, 3}, 13), random_tensor(Shape{4, 3}, 14)},
                  OpCheck{.attrs = Attrs{{"delta", 1.0}}, .constant_inputs = {1}});
  // Probabilities in [0.2, 0.8] and 0/1 targets.
  Tensor p = random_tensor(Shape{4, 2}, 15);
  for (std::int64_t i = 0; i < p.num_elements(); ++i) p.mutable_data<float>()[i] = 0.5f + 0.3f * p.data<float>()[i];
  Tensor t = Tensor::from_floats(Shape{4, 2}, std::vector<float>{0, 1, 1, 0, 1, 1, 0, 0});
  check_op_inputs("BinaryXent", {p, t}, OpCheck{.attrs = Attrs{{"epsilon", 1e-7}}, .constant_inputs = {1}});
}

TEST_CASE("SoftmaxXent's gradient holds for target rows that do not sum to 1") {
  // Soft targets summing to 0.5, 2 and 0: the gradient is softmax * (row's target sum) - target.
  const Tensor logits = random_tensor(Shape{3, 4}, 8);
  const Tensor t = Tensor::from_floats(Shape{3, 4}, std::vector<float>{0.5f, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0});
  check_op_inputs("SoftmaxXent", {logits, t}, OpCheck{.constant_inputs = {1}});
}

TEST_CASE("ClassWeight gives each row its class's weight, and the CPU's bits on the test device") {
  const Tensor weights = Tensor::from_floats(Shape{3}, std::vector<float>{0.5f, 2.0f, 4.0f});
  // Sparse labels; a label outside the weights weighs 0 (the loss reports it).
  const Tensor labels = Tensor::from_ints(Shape{5}, std::vector<std::int32_t>{2, 0, 1, 7, -1});
  CHECK(testing::run_op("ClassWeight", {labels, weights}, {}).to_floats() ==
        std::vector<float>{4.0f, 0.5f, 2.0f, 0.0f, 0.0f});
  // One-hot (or soft) rows: their dot product with the weights.
  const Tensor one_hot = Tensor::from_floats(Shape{2, 3}, std::vector<float>{0, 1, 0, 0.5f, 0, 0.5f});
  CHECK(testing::run_op("ClassWeight", {one_hot, weights}, {}).to_floats() == std::vector<float>{2.0f, 2.25f});
  // Binary targets and two weights: w0 (1 - y) + w1 y.
  const Tensor two = Tensor::from_floats(Shape{2}, std::vector<float>{3.0f, 0.5f});
  const Tensor binary = Tensor::from_floats(Shape{3, 1}, std::vector<float>{0, 1, 1});
  CHECK(testing::run_op("ClassWeight", {binary, two}, {}).to_floats() == std::vector<float>{3.0f, 0.5f, 0.5f});
  if (testing::runs_on_test_device("ClassWeight")) {
    const Tensor many = testing::random_tensor(Shape{300, 3}, 4);
    testing::compare_on_test_device("ClassWeight", {labels, weights}, {},
                                    testing::run_op("ClassWeight", {labels, weights}, {}));
    testing::compare_on_test_device("ClassWeight", {many, weights}, {},
                                    testing::run_op("ClassWeight", {many, weights}, {}));
    testing::compare_on_test_device("ClassWeight", {binary, two}, {},
                                    testing::run_op("ClassWeight", {binary, two}, {}));
  }
}
