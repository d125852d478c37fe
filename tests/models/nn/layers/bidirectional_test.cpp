// Bidirectional: the shared layer checks for each merge mode and cell (but the Keras round trip, whose file
// holds the wrapped layer as a Keras object: tests/models/io/keras_import_test.cpp reads such files), Keras' parameter
// count and names, the outputs against the two directions written out in double precision, and what it refuses.
#include <doctest/doctest.h>

#include "models/nn/layers/layer_test_util.h"
#include "models/nn/layers/recurrent_test_util.h"

namespace tctl {
namespace {

using testing::build_one_layer;
using testing::check_layer;
using testing::check_layer_spec_error;

const testing::LayerCheckOptions kChecks{.keras = false};

TEST_CASE("Bidirectional passes the layer checks for every merge mode") {
  auto checked = check_layer(R"({"type":"Bidirectional","layer":{"type":"LSTM","units":4}})", {5, 3}, kChecks);
  CHECK(checked.output_shape == Shape{8});
  CHECK(checked.layer().param_count() == 256);  // Keras: two LSTMs of 128
  CHECK(checked.layer().name() == "bidirectional");
  const auto& vars = checked.layer().variables();
  REQUIRE(vars.size() == 6);
  CHECK(vars[0]->name() == "bidirectional/forward_lstm/kernel");
  CHECK(vars[5]->name() == "bidirectional/backward_lstm/bias");
  CHECK(check_layer(R"({"type":"Bidirectional","layer":{"type":"GRU","units":3,"return_sequences":true},)"
                    R"("merge_mode":"sum"})",
                    {4, 2}, kChecks)
            .output_shape == Shape{4, 3});
  check_layer(R"({"type":"Bidirectional","layer":{"type":"SimpleRNN","units":3,"return_sequences":true},)"
              R"("merge_mode":"ave"})",
              {4, 2}, kChecks);
  check_layer(R"({"type":"Bidirectional","layer":{"type":"LSTM","units":2,"name":"enc"},"merge_mode":"mul"})", {3, 2},
              kChecks);
}

TEST_CASE("Bidirectional's step t holds both directions' outputs at input step t") {
  const std::int64_t batch = 3, steps = 4, features = 2, units = 3;
  auto net = build_one_layer(R"({"type":"Bidirectional","layer":{"type":"GRU","units":3,"return_sequences":true}})",
                             {steps, features});
  const auto& vars = net->layers().front()->variables();
  REQUIRE(vars.size() == 6);
  testing::RecurrentWeights w[2];
  for (std::size_t i = 0; i < 6; ++i) {
    const Tensor v = testing::random_tensor(vars[i]->read().shape(), 200 + i, -0.6f, 0.6f);
    vars[i]->assign(v);
    std::vector<float>* parts[] = {&w[i / 3].kernel, &w[i / 3].recurrent, &w[i / 3].bias};
    *parts[i % 3] = v.to_floats();
  }
  const Tensor x = testing::random_tensor(Shape{batch, steps, features}, 9, -2.0f, 2.0f);
  const auto forward = testing::reference_recurrent("gru", x.to_floats(), batch, steps, features, units, w[0], false);
  const auto backward = testing::reference_recurrent("gru", x.to_floats(), batch, steps, features, units, w[1], true);
  const std::vector<float> y = testing::run_net(*net, x).to_floats();
  REQUIRE(y.size() == static_cast<std::size_t>(batch * steps * 2 * units));
  double worst = 0.0;
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t t = 0; t < steps; ++t)
      for (std::int64_t u = 0; u < units; ++u) {
        const float* row = y.data() + (n * steps + t) * 2 * units;
        worst = std::max(worst, std::abs(row[u] - forward[(n * steps + t) * units + u]));
        // The backward layer's step steps - 1 - t read input step t.
        worst = std::max(worst, std::abs(row[units + u] - backward[(n * steps + steps - 1 - t) * units + u]));
      }
  CHECK(worst <= 1e-5);
}

TEST_CASE("Bidirectional wraps only a recurrent layer") {
  check_layer_spec_error(R"({"type":"Bidirectional","layer":{"type":"Dense","units":4}})", {5, 3}, "layers[0].layer",
                         "wraps a SimpleRNN, LSTM or GRU");
  check_layer_spec_error(R"({"type":"Bidirectional","layer":{"type":"LSTM","units":4},"merge_mode":"none"})", {5, 3},
                         "layers[0].merge_mode", "");
  check_layer_spec_error(R"({"type":"Bidirectional","layer":{"type":"LSTM","units":0}})", {5, 3},
                         "layers[0].layer.units", "");
}

}  // namespace
}  // namespace tctl
