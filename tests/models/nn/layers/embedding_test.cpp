// Embedding: the shared layer checks on token ids, the rows it looks up, the gradient summed into repeated
// rows, ids it refuses, and bad keys.
#include <doctest/doctest.h>

#include "core/autodiff.h"
#include "core/errors.h"
#include "models/nn/layers/layer_test_util.h"

namespace tctl {
namespace {

using testing::build_one_layer;
using testing::check_layer;
using testing::check_layer_spec_error;
using testing::run_net;

TEST_CASE("Embedding passes the layer checks on token ids") {
  auto checked = check_layer(R"({"type":"Embedding","input_dim":7,"output_dim":3})", {5},
                             {.flops_per_example = 0, .token_ids = 7});
  CHECK(checked.output_shape == Shape{5, 3});
  CHECK(checked.layer().param_count() == 21);  // Keras: input_dim * output_dim
  CHECK(checked.layer().name() == "embedding");
  // Ids of any shape: a grid of 2 x 3 gives 2 x 3 vectors.
  CHECK(check_layer(R"({"type":"Embedding","input_dim":4,"output_dim":2})", {2, 3}, {.token_ids = 4}).output_shape ==
        Shape{2, 3, 2});
}

TEST_CASE("Embedding looks up the table's rows, starting within Keras' uniform bounds") {
  auto net = build_one_layer(R"({"type":"Embedding","input_dim":3,"output_dim":2})", {4});
  const std::vector<float> table = net->variables()[0]->read().to_floats();
  for (float v : table) CHECK((v >= -0.05f && v <= 0.05f));
  const Tensor ids = Tensor::from_floats(Shape{1, 4}, std::vector<float>{2, 0, 2, 1});
  const std::vector<float> out = run_net(*net, ids).to_floats();
  const std::vector<float> expected{table[4], table[5], table[0], table[1], table[4], table[5], table[2], table[3]};
  CHECK(out == expected);
}

TEST_CASE("Embedding's gradient sums the rows of dy into the rows read, whatever the thread count") {
  auto net = build_one_layer(R"({"type":"Embedding","input_dim":4,"output_dim":40})", {6});
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    auto g = std::make_shared<Graph>();
    Output x = g->placeholder("x", DType::kF32, Shape{-1, 6});
    Output y = net->call(*g, x, true, "cpu");
    Output loss = g->add("Sum", {y});
    Output table{-1};
    for (const Node& n : g->nodes())
      if (n.op->name == "ReadVariable") table = Output{n.id};
    const Output read[] = {table};
    Output grad = gradients(*g, loss, read)[0];
    ThreadPool inter(1), intra(threads);
    Session s(g, inter, intra);
    // Id 3 three times, 0 twice, 1 once, 2 never.
    std::vector<Feed> feeds{{x, Tensor::from_floats(Shape{1, 6}, std::vector<float>{3, 0, 3, 1, 0, 3})}};
    std::vector<Output> fetches{grad};
    const std::vector<float> got = s.run(feeds, fetches)[0].to_floats();
    for (std::int64_t row = 0; row < 4; ++row)
      for (std::int64_t c = 0; c < 40; ++c)
        CHECK(got[static_cast<std::size_t>(row * 40 + c)] == float{(row == 3   ? 3.0f
                                                                    : row == 0 ? 2.0f
                                                                    : row == 1 ? 1.0f
                                                                               : 0.0f)});
  }
}

TEST_CASE("Embedding refuses an id outside the table or between two, naming the node and the element") {
  auto net = build_one_layer(R"({"type":"Embedding","input_dim":5,"output_dim":2})", {3});
  for (const float bad : {5.0f, -1.0f, 1.5f}) {
    CAPTURE(bad);
    const Tensor ids = Tensor::from_floats(Shape{1, 3}, std::vector<float>{0, 4, bad});
    try {
      run_net(*net, ids);
      FAIL("no error");
    } catch (const RuntimeError& e) {
      const std::string what = e.what();
      CHECK(what.find("embedding/Embedding") != std::string::npos);
      CHECK(what.find("element 2") != std::string::npos);
      CHECK(what.find("not a whole number in [0, 5)") != std::string::npos);
    }
  }
}

TEST_CASE("Embedding bad keys name their JSON path") {
  check_layer_spec_error(R"({"type":"Embedding","output_dim":2})", {3}, "layers[0]", "input_dim");
  check_layer_spec_error(R"({"type":"Embedding","input_dim":0,"output_dim":2})", {3}, "layers[0].input_dim",
                         "positive");
  check_layer_spec_error(R"({"type":"Embedding","input_dim":4,"output_dim":2,"mask_zero":true})", {3, 2},
                         "layers[0].mask_zero", "over the steps of a sequence of ids (None, steps)");
  check_layer_spec_error(R"({"type":"Embedding","input_dim":1000000,"output_dim":100000})", {3}, "layers[0].output_dim",
                         "larger than the 2^31 elements");
}

}  // namespace
}  // namespace tctl
