// SelfAttention: against attention written out in double precision (heads, the 1 / sqrt(d) scale, Keras'
// -1e9 for excluded pairs, causal), and its gradient against finite differences, with and without a mask.
#include <cmath>
#include <vector>

#include "kernels/op_test_util.h"

using namespace tctl;
using tctl::testing::check_op_inputs;
using tctl::testing::OpCheck;
using tctl::testing::random_tensor;
using tctl::testing::run_op;

namespace {

std::vector<double> reference(const Tensor& qkv, const std::vector<float>& mask, std::int64_t heads, bool causal) {
  const std::int64_t n = qkv.shape()[0], t = qkv.shape()[1], width = qkv.shape()[2] / 3, d = width / heads;
  const float* x = qkv.data<float>();
  std::vector<double> out(static_cast<std::size_t>(n * t * width));
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < t; ++i) {
        std::vector<double> s(static_cast<std::size_t>(t));
        double mx = -1e300, sum = 0.0;
        for (std::int64_t j = 0; j < t; ++j) {
          double dot = 0.0;
          for (std::int64_t c = 0; c < d; ++c)
            dot += double{x[(b * t + i) * 3 * width + h * d + c]} * x[(b * t + j) * 3 * width + width + h * d + c];
          const bool excluded = (causal && j > i) || (!mask.empty() && (mask[b * t + i] == 0 || mask[b * t + j] == 0));
          // Keras adds -1e9 in float32, which swamps the score: a query with every key excluded attends evenly.
          s[j] = excluded ? static_cast<double>(static_cast<float>(dot / std::sqrt(static_cast<double>(d))) - 1e9f)
                          : dot / std::sqrt(static_cast<double>(d));
          mx = std::max(mx, s[j]);
        }
        for (auto& v : s) sum += (v = std::exp(v - mx));
        for (std::int64_t c = 0; c < d; ++c) {
          double o = 0.0;
          for (std::int64_t j = 0; j < t; ++j) o += s[j] / sum * x[(b * t + j) * 3 * width + 2 * width + h * d + c];
          out[(b * t + i) * width + h * d + c] = o;
        }
      }
  return out;
}

}  // namespace

TEST_CASE("SelfAttention is softmax(Q K^T / sqrt(d) + mask) V per head, on any thread count") {
  const Tensor qkv = random_tensor(Shape{3, 5, 24}, 1);  // 2 heads of 4
  const std::vector<float> mask{1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  for (const bool causal : {false, true}) {
    for (const bool masked : {false, true}) {
      CAPTURE(causal);
      CAPTURE(masked);
      const Attrs attrs{{"heads", std::int64_t{2}}, {"causal", std::int64_t{causal}}};
      std::vector<Tensor> inputs{qkv};
      if (masked) inputs.push_back(Tensor::from_floats(Shape{3, 5}, mask));
      const std::vector<double> want = reference(qkv, masked ? mask : std::vector<float>{}, 2, causal);
      for (const int threads : {1, 3}) {
        const std::vector<float> got = run_op("SelfAttention", inputs, attrs, threads).to_floats();
        REQUIRE(got.size() == want.size());
        double worst = 0.0;
        for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
        CHECK(worst <= 2e-6);
      }
    }
  }
}

TEST_CASE("SelfAttention's gradient checks against finite differences, masked and causal") {
  const Tensor qkv = random_tensor(Shape{2, 4, 12}, 2);  // 2 heads of 2
  check_op_inputs("SelfAttention", {qkv}, {.attrs = Attrs{{"heads", std::int64_t{2}}}});
  const Tensor mask = Tensor::from_floats(Shape{2, 4}, std::vector<float>{1, 1, 0, 1, 1, 1, 1, 0});
  check_op_inputs("SelfAttention", {qkv, mask},
                  {.attrs = Attrs{{"heads", std::int64_t{2}}, {"causal", std::int64_t{1}}}, .constant_inputs = {1}});
}

TEST_CASE("SelfAttention's dropout drops weights, the same ones in its gradient") {
  // Q = K = 0 and V = 1: every weight is 1 / T, so without dropout each output is 1, and with rate 0.5 it is
  // 2 / T times the weights kept, a multiple of 2 / T.
  constexpr std::int64_t kSteps = 8, kBatch = 4, kWidth = 4;
  std::vector<float> values(kBatch * kSteps * 3 * kWidth, 0.0f);
  for (std::int64_t r = 0; r < kBatch * kSteps; ++r)
    for (std::int64_t c = 2 * kWidth; c < 3 * kWidth; ++c) values[static_cast<std::size_t>(r * 3 * kWidth + c)] = 1.0f;
  const Tensor qkv = Tensor::from_floats(Shape{kBatch, kSteps, 3 * kWidth}, values);
  const Attrs attrs{{"heads", std::int64_t{2}}, {"dropout", 0.5}, {"stream", std::int64_t{7}}};
  const std::vector<float> got = run_op("SelfAttention", {qkv}, attrs, 1).to_floats();
  double sum = 0.0;
  bool differ = false;
  for (float v : got) {
    const double kept = v * kSteps / 2.0;
    CHECK(std::abs(kept - std::round(kept)) < 1e-5);
    sum += v;
    differ = differ || v != got[0];
  }
  CHECK(differ);
  // 512 weights per head and example kept with probability 1/2: the mean output stays near 1.
  CHECK(std::abs(sum / static_cast<double>(got.size()) - 1.0) < 0.15);
  // Any thread count draws the same weights.
  CHECK(run_op("SelfAttention", {qkv}, attrs, 3).to_floats() == got);
  // The gradient replays the forward pass's weights.
  check_op_inputs("SelfAttention", {random_tensor(Shape{2, 4, 12}, 3)},
                  {.attrs = Attrs{{"heads", std::int64_t{2}}, {"dropout", 0.3}, {"stream", std::int64_t{5}}}});
}
