// Reduced compute types (core/compute_type.h): the host's rounding, which sim's products use as a GPU's
// reduced-precision products read their operands, and what a run's compute type changes: the products on sim,
// nothing on the CPU, nothing but products anywhere.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "core/session.h"
#include "core/thread_pool.h"

using namespace tctl;

TEST_CASE("round_to: bfloat16 and float16 round to nearest, ties to even, float16 overflowing to infinity") {
  CHECK(round_to(ComputeType::kF32, 1.0f + 0x1p-20f) == 1.0f + 0x1p-20f);
  // bfloat16 keeps 8 significant bits: 1 + 2^-8 is halfway between 1 and 1 + 2^-7, and goes to the even one.
  CHECK(round_to(ComputeType::kBF16, 1.0f + 0x1p-8f) == 1.0f);
  CHECK(round_to(ComputeType::kBF16, 1.0f + 0x1p-7f + 0x1p-8f) == 1.0f + 0x1p-6f);
  CHECK(round_to(ComputeType::kBF16, 1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f);
  CHECK(round_to(ComputeType::kBF16, -0x1.fffffep127f) == -std::numeric_limits<float>::infinity());
  CHECK(round_to(ComputeType::kBF16, 0x1.fep127f) == 0x1.fep127f);
  CHECK(std::isnan(round_to(ComputeType::kBF16, std::numeric_limits<float>::quiet_NaN())));
  CHECK(std::isinf(round_to(ComputeType::kBF16, std::numeric_limits<float>::infinity())));
  // float16 keeps 11 significant bits: 2049 is halfway between 2048 and 2050, 2051 between 2050 and 2052.
  CHECK(round_to(ComputeType::kF16, 2049.0f) == 2048.0f);
  CHECK(round_to(ComputeType::kF16, 2051.0f) == 2052.0f);
  CHECK(round_to(ComputeType::kF16, -0.1f) == -0.0999755859375f);
  CHECK(round_to(ComputeType::kF16, 65504.0f) == 65504.0f);
  CHECK(round_to(ComputeType::kF16, 65519.0f) == 65504.0f);
  CHECK(round_to(ComputeType::kF16, 65520.0f) == std::numeric_limits<float>::infinity());
  CHECK(round_to(ComputeType::kF16, -1e6f) == -std::numeric_limits<float>::infinity());
  // Below 2^-14, float16's steps are 2^-24: half a step rounds to zero (even), more to one step.
  CHECK(round_to(ComputeType::kF16, 0x1p-25f) == 0.0f);
  CHECK(round_to(ComputeType::kF16, 0x1.8p-25f) == 0x1p-24f);
  CHECK(round_to(ComputeType::kF16, 3.0f * 0x1p-24f + 0x1p-26f) == 3.0f * 0x1p-24f);
  CHECK(round_to(ComputeType::kF16, 0x1.004p-14f) == 0x1.004p-14f);
  CHECK(compute_type_name(ComputeType::kBF16) == "bfloat16");
  CHECK(compute_type_name(ComputeType::kF16) == "float16");
}

namespace {

// Output y of `g` fed `feeds`, in a session whose products read their operands in `type`.
std::vector<float> run_under(ComputeType type, const std::shared_ptr<Graph>& g, const std::vector<Feed>& feeds,
                             Output y) {
  ThreadPool inter(1), intra(1);
  SessionOptions options;
  options.compute_type = type;
  Session s(g, inter, intra, options);
  return s.run(feeds, std::vector<Output>{y})[0].to_floats();
}

// y = (x w + b) + c on `device`, run under `type`: a FusedMatMul, then a BiasAdd; x and w are fed (they
// start on the host).
struct Product {
  std::shared_ptr<Graph> g = std::make_shared<Graph>();
  Output x, w, y;
  explicit Product(const char* device) {
    x = g->placeholder("x", DType::kF32, Shape{2, 3});
    w = g->placeholder("w", DType::kF32, Shape{3, 2});
    Graph::Scope scope(*g, "dense", device, Phase::kForward);
    // The biases are not a product's operands: they are added in float32 under every type.
    const Output b = g->constant(Tensor::from_floats(Shape{2}, std::vector<float>{0x1p-12f, 1.0f + 0x1p-12f}));
    const Output c = g->constant(Tensor::from_floats(Shape{2}, std::vector<float>{3.0f + 0x1p-20f, -0x1p-15f}));
    y = g->add("BiasAdd", {g->add("FusedMatMul", {x, w, b}, Attrs{{"activation", "linear"}}), c});
  }
  std::vector<float> run(ComputeType type, const std::vector<float>& xv, const std::vector<float>& wv) const {
    return run_under(type, g, {{x, Tensor::from_floats(Shape{2, 3}, xv)}, {w, Tensor::from_floats(Shape{3, 2}, wv)}},
                     y);
  }
};

std::vector<float> rounded(ComputeType type, std::vector<float> v) {
  for (float& f : v) f = round_to(type, f);
  return v;
}

}  // namespace

TEST_CASE("a run's compute type rounds a product's operands on sim, as a GPU reads them, and nothing else") {
  const std::vector<float> x{1.0f + 0x1p-9f, -2.0f + 0x1p-10f, 0.3f, 1.0f / 3.0f, 5.0f + 0x1p-11f, -0.7f};
  const std::vector<float> w{0.1f, -1.0f - 0x1p-9f, 2.0f / 3.0f, 0.25f + 0x1p-13f, -3.0f, 7.0f + 0x1p-10f};
  const Product sim("sim:0"), cpu("cpu");
  const std::vector<float> f32 = cpu.run(ComputeType::kF32, x, w);
  CHECK(sim.run(ComputeType::kF32, x, w) == f32);
  // The CPU has no float16 products: float32's bits. Its bfloat16 products, on a processor with AVX-512 BF16,
  // read the operands as sim does and sum them by pairs (kernels/cpu/bf16_product.h); elsewhere float32's bits.
  CHECK(cpu.run(ComputeType::kF16, x, w) == f32);
  const std::vector<float> cpu_bf16 = cpu.run(ComputeType::kBF16, x, w);
  if (cpu_bf16_products()) {
    const std::vector<float> as_sim = sim.run(ComputeType::kBF16, x, w);
    for (std::size_t i = 0; i < as_sim.size(); ++i) CHECK(cpu_bf16[i] == doctest::Approx(as_sim[i]).epsilon(1e-6));
    CHECK(cpu_bf16 != f32);
  } else {
    CHECK(cpu_bf16 == f32);
  }
  for (const ComputeType type : {ComputeType::kBF16, ComputeType::kF16}) {
    INFO(compute_type_name(type));
    const std::vector<float> got = sim.run(type, x, w);
    CHECK(got == cpu.run(ComputeType::kF32, rounded(type, x), rounded(type, w)));
    CHECK(got != f32);
  }
  // float16 overflows past 65504: the product is infinite, which a loss scale's guard finds (a skipped step).
  std::vector<float> large = x;
  large[0] = 70000.0f;
  CHECK(std::isinf(sim.run(ComputeType::kF16, large, w)[0]));
  CHECK(std::isfinite(sim.run(ComputeType::kBF16, large, w)[0]));
}

TEST_CASE("a convolution on sim reads its image and kernel in the run's compute type") {
  std::vector<float> image(1 * 4 * 4 * 2), kernel(3 * 3 * 2 * 3);
  for (std::size_t i = 0; i < image.size(); ++i) image[i] = 1.0f / static_cast<float>(i + 3);
  for (std::size_t i = 0; i < kernel.size(); ++i) kernel[i] = 0.5f - 1.0f / static_cast<float>(i + 7);
  const auto run = [&](const char* device, ComputeType type, const std::vector<float>& x, const std::vector<float>& k) {
    auto g = std::make_shared<Graph>();
    const Output in = g->placeholder("x", DType::kF32, Shape{1, 4, 4, 2});
    const Output w = g->placeholder("k", DType::kF32, Shape{3, 3, 2, 3});
    Output y;
    {
      Graph::Scope scope(*g, "conv", device, Phase::kForward);
      y = g->add("Conv2D", {in, w},
                 Attrs{{"strides", std::vector<std::int64_t>{1, 1}}, {"padding", std::string("same")}});
    }
    return run_under(
        type, g, {{in, Tensor::from_floats(Shape{1, 4, 4, 2}, x)}, {w, Tensor::from_floats(Shape{3, 3, 2, 3}, k)}}, y);
  };
  const std::vector<float> f32 = run("cpu", ComputeType::kF32, image, kernel);
  for (const ComputeType type : {ComputeType::kBF16, ComputeType::kF16}) {
    INFO(compute_type_name(type));
    const std::vector<float> got = run("sim:0", type, image, kernel);
    CHECK(got == run("cpu", ComputeType::kF32, rounded(type, image), rounded(type, kernel)));
    CHECK(got != f32);
  }
}
