// ModelOptions::combine_gradients: the one place between "gradients computed" and "updates applied".
#include <doctest/doctest.h>

#include "models/train/model.h"

namespace tctl {
namespace {

std::vector<std::vector<float>> hooked_weights(const Sequential& net) {
  std::vector<std::vector<float>> out;
  for (const auto& v : net.variables()) out.push_back(v->read().to_floats());
  return out;
}

float train_once(ModelOptions options, std::vector<std::vector<float>>* before,
                 std::vector<std::vector<float>>* after) {
  auto net =
      std::make_shared<Sequential>(Sequential::from_json(nlohmann::json::parse(R"({"input_shape": [3], "layers": [
      {"type": "Dense", "units": 4, "activation": "relu"}, {"type": "Dense", "units": 2, "activation": "softmax"}]})"),
                                                         "model.json", "", 7));
  options.inter_op_threads = 1;
  options.intra_op_threads = 1;
  Model model(net, options);
  *before = hooked_weights(*net);
  const Tensor x = Tensor::from_floats(Shape{4, 3}, std::vector<float>{1, 2, 3, -1, 0.5f, 2, 0, -2, 1, 3, 1, -1});
  const Tensor y = Tensor::from_ints(Shape{4}, std::vector<std::int32_t>{0, 1, 1, 0});
  const float loss = model.train_step(x, y, 0);
  *after = hooked_weights(*net);
  return loss;
}

}  // namespace

TEST_CASE("combine_gradients sees every trainable variable's gradient, and the optimizer applies what it returns") {
  ModelOptions plain;
  plain.optimizer.type = "sgd";
  plain.optimizer.learning_rate = 0.1;
  std::vector<std::vector<float>> before, after;
  train_once(plain, &before, &after);
  CHECK(before != after);  // without a hook, the step moves the weights

  int calls = 0;
  std::size_t seen = 0;
  ModelOptions zeroed = plain;
  zeroed.combine_gradients = [&](Graph& g, std::span<const std::shared_ptr<Variable>> vars, std::vector<Output> grads) {
    ++calls;
    seen = vars.size();
    for (Output& grad : grads) grad = g.add("ZerosLike", {grad});
    return grads;
  };
  std::vector<std::vector<float>> before_zeroed, after_zeroed;
  train_once(zeroed, &before_zeroed, &after_zeroed);
  CHECK(calls == 1);  // once, while the training graph is traced
  CHECK(seen == 4);   // two kernels, two biases
  CHECK(before_zeroed == before);
  CHECK(after_zeroed == before_zeroed);  // zero gradients applied: nothing moved

  ModelOptions identity = plain;
  identity.combine_gradients = [](Graph&, std::span<const std::shared_ptr<Variable>>, std::vector<Output> grads) {
    return grads;
  };
  std::vector<std::vector<float>> before_identity, after_identity;
  train_once(identity, &before_identity, &after_identity);
  CHECK(after_identity == after);
}

}  // namespace tctl
