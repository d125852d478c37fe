// LayerNormalization: the shared layer checks, each row normalized on its own in training and inference
// alike, center and scale switched off, and a bad axis.
#include <doctest/doctest.h>

#include <cmath>

#include "models/nn/layers/layer_test_util.h"

namespace tctl {
namespace {

using testing::build_one_layer;
using testing::check_layer;
using testing::check_layer_spec_error;
using testing::run_net;

TEST_CASE("LayerNormalization passes the layer checks") {
  auto checked = check_layer(R"({"type":"LayerNormalization"})", {6});
  CHECK(checked.output_shape == Shape{6});
  CHECK(checked.layer().param_count() == 12);  // Keras: gamma and beta, one each per feature
  CHECK(checked.layer().name() == "layer_normalization");
  // Over the last axis of a sequence, every step alone; gamma and beta random so their gradients count.
  CHECK(check_layer(R"({"type":"LayerNormalization","epsilon":0.01})", {3, 5}, {.training = true}).output_shape ==
        Shape{3, 5});
  CHECK(check_layer(R"({"type":"LayerNormalization","center":false,"scale":false})", {4}).layer().param_count() == 0);
}

TEST_CASE("LayerNormalization gives each row mean 0 and variance 1 / (1 + epsilon / variance)") {
  auto net = build_one_layer(R"({"type":"LayerNormalization","epsilon":0.001})", {4});
  const Tensor x = Tensor::from_floats(Shape{2, 4}, std::vector<float>{1, 2, 3, 4, -10, 0, 10, 20});
  for (const bool training : {false, true}) {
    CAPTURE(training);
    const std::vector<float> y = run_net(*net, x, training).to_floats();
    for (int r = 0; r < 2; ++r) {
      double mean = 0, sq = 0;
      for (int j = 0; j < 4; ++j) mean += y[static_cast<std::size_t>(r * 4 + j)] / 4.0;
      for (int j = 0; j < 4; ++j) sq += std::pow(y[static_cast<std::size_t>(r * 4 + j)] - mean, 2) / 4.0;
      CHECK(mean == doctest::Approx(0).epsilon(1e-6));
      const double variance = r == 0 ? 1.25 : 125.0;
      CHECK(sq == doctest::Approx(variance / (variance + 0.001)).epsilon(1e-5));
    }
  }
}

TEST_CASE("LayerNormalization takes only the last axis, as -1, [-1] or its index") {
  CHECK(build_one_layer(R"({"type":"LayerNormalization","axis":[-1]})", {3})->output_shape() == Shape{3});
  CHECK(build_one_layer(R"({"type":"LayerNormalization","axis":2})", {2, 3})->output_shape() == Shape{2, 3});
  check_layer_spec_error(R"({"type":"LayerNormalization","axis":1})", {2, 3}, "layers[0].axis",
                         "only the last axis (-1) is supported, got 1");
  check_layer_spec_error(R"({"type":"LayerNormalization","epsilon":0})", {3}, "layers[0].epsilon", "");
}

}  // namespace
}  // namespace tctl
