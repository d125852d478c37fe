// BatchNormalization: the shared layer checks in inference and training mode, batch statistics, the
// moving-average update, the variables, and one case per bad key.
#include <doctest/doctest.h>

#include <cmath>

#include "core/errors.h"
#include "models/nn/layers/layer_test_util.h"

namespace tctl {
namespace {

using testing::build_one_layer;
using testing::check_layer;
using testing::check_layer_spec_error;
using testing::LayerCheckOptions;

TEST_CASE("BatchNormalization passes the layer checks in inference mode") {
  auto checked = check_layer(R"({"type":"BatchNormalization"})", {4});
  CHECK(checked.output_shape == Shape{4});
  CHECK(checked.layer().name() == "batch_normalization");
  check_layer(R"({"type":"BatchNormalization","center":false})", {3, 2, 2});
  // Keras' axis 2 here is its last axis, which the importer writes as -1: not a round trip.
  check_layer(R"({"type":"BatchNormalization","scale":false,"axis":2})", {2, 3}, {.keras = false});
}

TEST_CASE("BatchNormalization passes the layer checks in training mode, through the batch statistics") {
  // Momentum 1 keeps the moving statistics where they start, so the JSON round trip's weights compare
  // equal after the many runs of the finite differences.
  LayerCheckOptions o;
  o.training = true;
  o.batch = 5;
  check_layer(R"({"type":"BatchNormalization","momentum":1.0})", {3}, o);
  check_layer(R"({"type":"BatchNormalization","momentum":1.0,"epsilon":0.01})", {2, 3, 2}, o);
  o.batch = 4;
  check_layer(R"({"type":"BatchNormalization","momentum":1.0,"center":false,"scale":false})", {3}, o);
}

TEST_CASE("BatchNormalization variables: gamma, beta trainable; moving statistics not") {
  auto net = build_one_layer(R"({"type":"BatchNormalization"})", {2, 3});
  const auto& vars = net->layers()[0]->variables();
  REQUIRE(vars.size() == 4);
  CHECK(vars[0]->name() == "batch_normalization/gamma");
  CHECK(vars[1]->name() == "batch_normalization/beta");
  CHECK(vars[2]->name() == "batch_normalization/moving_mean");
  CHECK(vars[3]->name() == "batch_normalization/moving_variance");
  for (const auto& v : vars) CHECK(v->shape() == Shape{3});
  CHECK(vars[0]->trainable());
  CHECK(vars[1]->trainable());
  CHECK(!vars[2]->trainable());
  CHECK(!vars[3]->trainable());
  CHECK(vars[0]->read().to_floats() == std::vector<float>{1, 1, 1});
  CHECK(vars[3]->read().to_floats() == std::vector<float>{1, 1, 1});
  CHECK(net->param_count() == 12);
  CHECK(net->trainable_param_count() == 6);
  auto bare = build_one_layer(R"({"type":"BatchNormalization","center":false,"scale":false})", {3});
  CHECK(bare->layers()[0]->variables().size() == 2);
  CHECK(bare->trainable_param_count() == 0);
}

TEST_CASE("BatchNormalization training normalizes with batch statistics and moves the moving ones") {
  auto net = build_one_layer(R"({"type":"BatchNormalization","momentum":0.9,"epsilon":0.001})", {2});
  // Channel 0: 1, 2, 3, 6 (mean 3, variance 3.5); channel 1: all 4 (variance 0).
  Tensor x = Tensor::from_floats(Shape{4, 2}, std::vector<float>{1, 4, 2, 4, 3, 4, 6, 4});
  std::vector<float> y = testing::run_net(*net, x, true).to_floats();
  const double s = 1.0 / std::sqrt(3.5 + 0.001);
  const std::vector<double> expected0{-2 * s, -1 * s, 0, 3 * s};
  for (int r = 0; r < 4; ++r) {
    CHECK(y[static_cast<std::size_t>(r * 2)] == doctest::Approx(expected0[static_cast<std::size_t>(r)]).epsilon(1e-5));
    CHECK(y[static_cast<std::size_t>(r * 2 + 1)] == 0.0f);
  }
  const auto& vars = net->layers()[0]->variables();
  auto mean = vars[2]->read().to_floats(), variance = vars[3]->read().to_floats();
  CHECK(mean[0] == doctest::Approx(0.1 * 3));
  CHECK(mean[1] == doctest::Approx(0.1 * 4));
  CHECK(variance[0] == doctest::Approx(0.9 + 0.1 * 3.5));
  CHECK(variance[1] == doctest::Approx(0.9));
  // A second step moves them again.
  testing::run_net(*net, x, true).to_floats();
  CHECK(vars[2]->read().to_floats()[0] == doctest::Approx(0.9 * 0.3 + 0.1 * 3));
}

TEST_CASE("BatchNormalization inference uses the moving statistics, gamma and beta") {
  auto net = build_one_layer(R"({"type":"BatchNormalization","epsilon":0.0001})", {2});
  const auto& vars = net->layers()[0]->variables();
  vars[0]->assign(Tensor::from_floats(Shape{2}, std::vector<float>{2, 1}));
  vars[1]->assign(Tensor::from_floats(Shape{2}, std::vector<float>{0.5f, -1}));
  vars[2]->assign(Tensor::from_floats(Shape{2}, std::vector<float>{1, -2}));
  vars[3]->assign(Tensor::from_floats(Shape{2}, std::vector<float>{4, 0.25f}));
  Tensor x = Tensor::from_floats(Shape{1, 2}, std::vector<float>{3, -1});
  std::vector<float> y = testing::run_net(*net, x, false).to_floats();
  CHECK(y[0] == doctest::Approx(2 * (3 - 1) / std::sqrt(4.0001) + 0.5).epsilon(1e-5));
  CHECK(y[1] == doctest::Approx(1 * (-1 + 2) / std::sqrt(0.2501) - 1).epsilon(1e-5));
  // Inference leaves the moving statistics alone.
  CHECK(vars[2]->read().to_floats() == std::vector<float>{1, -2});
}

TEST_CASE("BatchNormalization resolves every key in to_json") {
  auto net = build_one_layer(R"({"type":"BatchNormalization"})", {3});
  CHECK(net->layers()[0]->to_json() == nlohmann::json{{"type", "BatchNormalization"},
                                                      {"name", "batch_normalization"},
                                                      {"axis", -1},
                                                      {"momentum", 0.99},
                                                      {"epsilon", 0.001},
                                                      {"center", true},
                                                      {"scale", true}});
}

TEST_CASE("BatchNormalization bad keys name their JSON path") {
  const Shape in{3};
  check_layer_spec_error(R"({"type":"BatchNormalization","axis":0})", in, "layers[0].axis",
                         "only the last axis (-1) is supported, got 0");
  check_layer_spec_error(R"({"type":"BatchNormalization","axis":1})", {2, 3}, "layers[0].axis", "only the last axis");
  check_layer_spec_error(R"({"type":"BatchNormalization","axis":-2})", {2, 3}, "layers[0].axis", "only the last axis");
  check_layer_spec_error(R"({"type":"BatchNormalization","axis":[1]})", in, "layers[0].axis",
                         "expected -1 (the last axis)");
  // Read as int64 it wrapped to -1 and was taken for the last axis.
  check_layer_spec_error(R"({"type":"BatchNormalization","axis":18446744073709551615})", in, "layers[0].axis",
                         "expected -1 (the last axis), got 18446744073709551615");
  check_layer_spec_error(R"({"type":"BatchNormalization","momentum":1.5})", in, "layers[0].momentum",
                         "expected a number in [0.0, 1.0]");
  check_layer_spec_error(R"({"type":"BatchNormalization","epsilon":0})", in, "layers[0].epsilon",
                         "expected a positive number");
  check_layer_spec_error(R"({"type":"BatchNormalization","center":"yes"})", in, "layers[0].center",
                         "expected true or false");
  check_layer_spec_error(R"({"type":"BatchNormalization","scale":null})", in, "layers[0].scale",
                         "expected true or false");
  check_layer_spec_error(R"({"type":"BatchNormalization","beta_initializer":"zeros"})", in,
                         "layers[0].beta_initializer", "unknown key");
}

}  // namespace
}  // namespace tctl
