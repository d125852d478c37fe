// Rescaling: the shared layer checks, its values, and the bad keys.
#include <doctest/doctest.h>

#include "core/errors.h"
#include "models/nn/layers/layer_test_util.h"

namespace tctl {
namespace {

using testing::build_one_layer;
using testing::check_layer;
using testing::check_layer_spec_error;

// The layer's output for x of `shape` (batch first) in inference mode.
std::vector<float> run_rescaling(const std::string& spec, const Shape& shape, const std::vector<float>& x) {
  return testing::run_net(*build_one_layer(spec, shape.without_batch()), Tensor::from_floats(shape, x)).to_floats();
}

TEST_CASE("Rescaling passes the layer checks, with and without an offset") {
  auto checked = check_layer(R"({"type":"Rescaling","scale":0.00392156862745098})", {4, 4, 3});
  CHECK(checked.output_shape == Shape{4, 4, 3});
  CHECK(checked.layer().param_count() == 0);
  CHECK(checked.layer().name() == "rescaling");
  CHECK(checked.layer().to_json() ==
        nlohmann::json{{"type", "Rescaling"}, {"name", "rescaling"}, {"scale", 0.00392156862745098}, {"offset", 0.0}});
  check_layer(R"({"type":"Rescaling","scale":0.00784313725490196,"offset":-1})", {5});
  check_layer(R"({"type":"Rescaling","scale":1,"offset":0.5})", {2, 3});
}

TEST_CASE("Rescaling computes x * scale + offset, in float32, and adds nothing for scale 1 and offset 0") {
  const std::vector<float> x{0.0f, 127.5f, 255.0f, 12.0f, 200.0f, 64.0f};
  const Shape shape{2, 3};
  const std::vector<float> unit = run_rescaling(R"({"type":"Rescaling","scale":0.00392156862745098})", shape, x);
  const std::vector<float> symmetric =
      run_rescaling(R"({"type":"Rescaling","scale":0.00784313725490196,"offset":-1})", shape, x);
  for (std::size_t i = 0; i < x.size(); ++i) {
    CHECK(unit[i] == x[i] * static_cast<float>(0.00392156862745098));
    CHECK(symmetric[i] == x[i] * static_cast<float>(0.00784313725490196) + -1.0f);
  }
  CHECK(unit[2] == doctest::Approx(1.0));
  CHECK(symmetric[0] == -1.0f);
  CHECK(symmetric[2] == doctest::Approx(1.0));
  CHECK(run_rescaling(R"({"type":"Rescaling","scale":1})", shape, x) == x);
  CHECK(testing::layer_op_names(R"({"type":"Rescaling","scale":1})", {3}).empty());
  CHECK(testing::layer_op_names(R"({"type":"Rescaling","scale":2,"offset":1})", {3}) ==
        std::vector<std::string>{"Scale", "Const", "BiasAdd"});
}

TEST_CASE("Rescaling bad keys name their JSON path") {
  check_layer_spec_error(R"({"type":"Rescaling"})", {3}, "layers[0]", "missing required key \"scale\"");
  check_layer_spec_error(R"({"type":"Rescaling","scale":"1/255"})", {3}, "layers[0].scale",
                         "expected a number, got \"1/255\"");
  check_layer_spec_error(R"({"type":"Rescaling","scale":1e300})", {3}, "layers[0].scale", "expected a number in");
  check_layer_spec_error(R"({"type":"Rescaling","scale":1,"offset":[1,2,3]})", {3}, "layers[0].offset",
                         "expected a number");
  check_layer_spec_error(R"({"type":"Rescaling","scale":1,"seed":3})", {3}, "layers[0].seed", "unknown key");
}

}  // namespace
}  // namespace tctl
