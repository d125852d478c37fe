// LSTM: the shared layer checks (gradients, Keras round trip, ONNX's LSTM, FLOPs) in each of its forms,
// Keras' parameter count, the outputs against the cell written out in double precision, and what it refuses.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "models/nn/layers/layer_test_util.h"
#include "models/nn/layers/recurrent_test_util.h"

namespace tctl {
namespace {

using testing::check_layer;
using testing::check_layer_spec_error;
using testing::run_net;

TEST_CASE("LSTM passes the layer checks, last output and whole sequence, forwards and backwards") {
  // FLOPs per example: the input product, 5 steps x 3 features x 16 columns, and the recurrent one, 5 x 4 x
  // 16, two each.
  auto checked =
      check_layer(R"({"type":"LSTM","units":4})", {5, 3}, {.flops_per_example = 2.0 * (5 * 3 * 16 + 5 * 4 * 16)});
  CHECK(checked.output_shape == Shape{4});
  CHECK(checked.layer().param_count() == 128);  // Keras: 4 (3 x 4 + 4 x 4 + 4)
  CHECK(checked.layer().name() == "lstm");
  CHECK(check_layer(R"({"type":"LSTM","units":3,"return_sequences":true})", {4, 2}).output_shape == Shape{4, 3});
  check_layer(R"({"type":"LSTM","units":3,"return_sequences":true,"go_backwards":true})", {4, 2});
  check_layer(R"({"type":"LSTM","units":2,"go_backwards":true,"use_bias":false})", {3, 2});
  // Input dropout in training: the same mask in the forward pass, the gradient and the differences.
  check_layer(R"({"type":"LSTM","units":3,"dropout":0.25})", {4, 2}, {.training = true});
  // Recurrent dropout: the forward kernel, d h_{t-1} and dU all draw the same mask.
  check_layer(R"({"type":"LSTM","units":3,"recurrent_dropout":0.4,"return_sequences":true})", {4, 2},
              {.training = true});
}

TEST_CASE("LSTM computes Keras' cell: every step against the equations in double precision") {
  testing::check_recurrent_reference("LSTM", "lstm");
}

TEST_CASE("LSTM reading an Embedding on the CPU multiplies each distinct id's row once, to the same outputs") {
  // Embedding(30, 5) then LSTM(4) over 6 steps of ids that repeat: the input product is EmbeddingMatMul.
  auto spec = [](double dropout, const std::string& lstm_device = "") {
    nlohmann::json lstm{{"type", "LSTM"}, {"units", 4}, {"return_sequences", true}, {"dropout", dropout}};
    if (!lstm_device.empty()) lstm["device"] = lstm_device;
    return nlohmann::json{{"input_shape", {6}},
                          {"layers", {{{"type", "Embedding"}, {"input_dim", 30}, {"output_dim", 5}}, std::move(lstm)}}};
  };
  auto ops_of = [&](const std::string& device, double dropout, bool training, const std::string& lstm_device = "") {
    const Sequential net = Sequential::from_json(spec(dropout, lstm_device), "lstm.json", "", 7);
    Graph g;
    net.call(g, g.placeholder("x", DType::kF32, Shape{-1, 6}), training, device);
    std::vector<std::string> ops;
    for (const Node& n : g.nodes()) ops.push_back(n.op->name);
    return ops;
  };
  auto has = [](const std::vector<std::string>& ops, const std::string& op) {
    return std::find(ops.begin(), ops.end(), op) != ops.end();
  };
  CHECK(has(ops_of("cpu", 0.0, true), "EmbeddingMatMul"));
  CHECK(!has(ops_of("cpu", 0.0, true), "MatMul"));
  // Input dropout stands between the two, and sim has no kernel for it: the product of every row.
  CHECK(has(ops_of("cpu", 0.5, true), "MatMul"));
  CHECK(!has(ops_of("sim:0", 0.0, false), "EmbeddingMatMul"));
  // The table on the CPU, the LSTM on sim:0: the product is the LSTM's, on its device.
  CHECK(!has(ops_of("cpu", 0.0, false, "sim:0"), "EmbeddingMatMul"));
  CHECK(has(ops_of("cpu", 0.0, false, "sim:0"), "MatMul"));

  const auto net = std::make_shared<Sequential>(Sequential::from_json(spec(0.0), "lstm.json", "", 7));
  const auto& vars = net->variables();
  REQUIRE(vars.size() == 4);
  const std::vector<float> table = vars[0]->read().to_floats();
  testing::RecurrentWeights w{vars[1]->read().to_floats(), vars[2]->read().to_floats(), vars[3]->read().to_floats()};
  const std::int64_t batch = 19;
  std::vector<float> ids(static_cast<std::size_t>(batch * 6)), x;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<float>((i * 11) % 23);
    for (std::size_t f = 0; f < 5; ++f) x.push_back(table[static_cast<std::size_t>(ids[i]) * 5 + f]);
  }
  const std::vector<double> want = testing::reference_recurrent("lstm", x, batch, 6, 5, 4, w, false);
  for (const int threads : {1, 3}) {
    CAPTURE(threads);
    const std::vector<float> got = run_net(*net, Tensor::from_floats(Shape{batch, 6}, ids), false, threads).to_floats();
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i)
      CHECK(std::abs(got[i] - want[i]) <= 1e-5 * std::max(1.0, std::abs(want[i])));
  }
}

TEST_CASE("LSTM refuses what it does not compute") {
  check_layer_spec_error(R"({"type":"LSTM","units":4,"activation":"relu"})", {5, 3}, "layers[0].activation", "tanh");
  check_layer_spec_error(R"({"type":"LSTM","units":4,"recurrent_dropout":1})", {5, 3}, "layers[0].recurrent_dropout",
                         "");
  check_layer_spec_error(R"({"type":"LSTM","units":4})", {5}, "layers[0]", "(None, steps, features)");
  // Sizes past tensorctl's limits, refused before anything overflows or is allocated.
  check_layer_spec_error(R"({"type":"LSTM","units":4611686018427387904})", {5, 3}, "layers[0].units",
                         "larger than the 2^31 elements");
  check_layer_spec_error(R"({"type":"LSTM","units":16})", {1000000000, 4}, "layers[0].units",
                         "need a workspace larger than the 2^36 elements");
}

}  // namespace
}  // namespace tctl
