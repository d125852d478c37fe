// Reshape: the shared layer checks, the inferred -1, and one case per bad target_shape.
#include <doctest/doctest.h>

#include "core/errors.h"
#include "models/nn/layers/layer_test_util.h"

namespace tctl {
namespace {

using testing::build_one_layer;
using testing::check_layer;
using testing::check_layer_spec_error;

TEST_CASE("Reshape passes the layer checks") {
  auto checked = check_layer(R"({"type":"Reshape","target_shape":[3,4]})", {12});
  CHECK(checked.output_shape == Shape{3, 4});
  CHECK(checked.layer().to_json() ==
        nlohmann::json{{"type", "Reshape"}, {"name", "reshape"}, {"target_shape", {3, 4}}});
  CHECK(check_layer(R"({"type":"Reshape","target_shape":[2,-1,1]})", {3, 4}).output_shape == Shape{2, 6, 1});
}

TEST_CASE("Reshape keeps -1 in its spec and fills it from the input") {
  auto net = build_one_layer(R"({"type":"Reshape","target_shape":[-1,2]})", {2, 5});
  CHECK(net->output_shape() == Shape{5, 2});
  CHECK(net->layers()[0]->to_json()["target_shape"] == nlohmann::json{-1, 2});
}

TEST_CASE("Reshape bad target shapes name their JSON path") {
  check_layer_spec_error(R"({"type":"Reshape"})", {4}, "layers[0]", "missing required key \"target_shape\"");
  check_layer_spec_error(R"({"type":"Reshape","target_shape":[]})", {4}, "layers[0].target_shape",
                         "expected a list of 1 to 5");
  check_layer_spec_error(R"({"type":"Reshape","target_shape":4})", {4}, "layers[0].target_shape", "got 4");
  check_layer_spec_error(R"({"type":"Reshape","target_shape":[2,0]})", {4}, "layers[0].target_shape[1]",
                         "expected a positive integer or -1, got 0");
  check_layer_spec_error(R"({"type":"Reshape","target_shape":[-1,-1]})", {4}, "layers[0].target_shape[1]",
                         "only one entry may be -1");
  // Above INT64_MAX nlohmann holds an unsigned integer, which read as int64 wrapped to -1 and was taken.
  check_layer_spec_error(R"({"type":"Reshape","target_shape":[18446744073709551615]})", {4},
                         "layers[0].target_shape[0]", "expected a positive integer or -1, got 18446744073709551615");
  check_layer_spec_error(R"({"type":"Reshape","target_shape":[3,2]})", {4}, "layers[0].target_shape",
                         "cannot reshape (None, 4) (4 elements per example) to [3,2]");
  check_layer_spec_error(R"({"type":"Reshape","target_shape":[3,-1]})", {4}, "layers[0].target_shape",
                         "cannot reshape");
}

}  // namespace
}  // namespace tctl
