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
