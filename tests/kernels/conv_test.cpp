// Conv2D and its gradient ops: finite differences through the shared harness, a naive reference for
// strides and both paddings, thread-count independence and shape errors.
#include "kernels/cpu/winograd.h"
#include "kernels/op_test_util.h"

using namespace tctl;
using tctl::testing::check_op;
using tctl::testing::check_op_inputs;
using tctl::testing::OpCheck;
using tctl::testing::random_tensor;
using tctl::testing::run_op;

namespace {

Attrs conv_attrs(std::int64_t sh, std::int64_t sw, const std::string& padding) {
  return Attrs{{"strides", std::vector<std::int64_t>{sh, sw}}, {"padding", padding}};
}

// Direct convolution in double: out = ceil(in / s) with TF's padding split for "same".
std::vector<double> naive_conv(const Tensor& x, const Tensor& k, std::int64_t sh, std::int64_t sw, bool same,
                               std::int64_t& ho, std::int64_t& wo) {
  const std::int64_t n = x.shape()[0], h = x.shape()[1], w = x.shape()[2], c = x.shape()[3];
  const std::int64_t kh = k.shape()[0], kw = k.shape()[1], f = k.shape()[3];
  ho = same ? (h + sh - 1) / sh : (h - kh) / sh + 1;
  wo = same ? (w + sw - 1) / sw : (w - kw) / sw + 1;
  const std::int64_t ph = same ? std::max<std::int64_t>((ho - 1) * sh + kh - h, 0) / 2 : 0;
  const std::int64_t pw = same ? std::max<std::int64_t>((wo - 1) * sw + kw - w, 0) / 2 : 0;
  std::vector<double> y(static_cast<std::size_t>(n * ho * wo * f), 0.0);
  const float* px = x.data<float>();
  const float* pk = k.data<float>();
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t oh = 0; oh < ho; ++oh)
      for (std::int64_t ow = 0; ow < wo; ++ow)
        for (std::int64_t o = 0; o < f; ++o) {
          double s = 0.0;
          for (std::int64_t i = 0; i < kh; ++i)
            for (std::int64_t j = 0; j < kw; ++j)
              for (std::int64_t ch = 0; ch < c; ++ch) {
                const std::int64_t ih = oh * sh - ph + i, iw = ow * sw - pw + j;
                if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
                s += static_cast<double>(px[((b * h + ih) * w + iw) * c + ch]) * pk[((i * kw + j) * c + ch) * f + o];
              }
          y[static_cast<std::size_t>(((b * ho + oh) * wo + ow) * f + o)] = s;
        }
  return y;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.raw_data(), b.raw_data(), a.bytes()) == 0;
}

// The two gradients of a stride-1 convolution in double: dx[n, ih, iw, c] gains dy[n, oh, ow, f] k[i, j, c, f]
// for every window tap (i, j) over (ih, iw); dk[i, j, c, f] sums x at that tap times dy over all pixels.
void naive_conv_grads(const Tensor& x, const Tensor& k, const Tensor& dy, bool same, std::vector<double>& dx,
                      std::vector<double>& dk) {
  const std::int64_t n = x.shape()[0], h = x.shape()[1], w = x.shape()[2], c = x.shape()[3];
  const std::int64_t kh = k.shape()[0], kw = k.shape()[1], f = k.shape()[3];
  const std::int64_t ho = dy.shape()[1], wo = dy.shape()[2];
  const std::int64_t ph = same ? (kh - 1) / 2 : 0, pw = same ? (kw - 1) / 2 : 0;
  dx.assign(static_cast<std::size_t>(x.num_elements()), 0.0);
  dk.assign(static_cast<std::size_t>(k.num_elements()), 0.0);
  const float* px = x.data<float>();
  const float* pk = k.data<float>();
  const float* pdy = dy.data<float>();
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t oh = 0; oh < ho; ++oh)
      for (std::int64_t ow = 0; ow < wo; ++ow)
        for (std::int64_t i = 0; i < kh; ++i)
          for (std::int64_t j = 0; j < kw; ++j) {
            const std::int64_t ih = oh - ph + i, iw = ow - pw + j;
            if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
            const std::int64_t at = ((b * h + ih) * w + iw) * c;
            for (std::int64_t ch = 0; ch < c; ++ch)
              for (std::int64_t o = 0; o < f; ++o) {
                const double d = pdy[((b * ho + oh) * wo + ow) * f + o];
                const std::int64_t tap = ((i * kw + j) * c + ch) * f + o;
                dx[static_cast<std::size_t>(at + ch)] += d * pk[tap];
                dk[static_cast<std::size_t>(tap)] += d * px[at + ch];
              }
          }
}

// Largest |got - ref| over the largest |ref|: the error against the size of the values.
double relative_error(const Tensor& got, const std::vector<double>& ref) {
  REQUIRE(static_cast<std::size_t>(got.num_elements()) == ref.size());
  double err = 0.0, size = 0.0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    err = std::max(err, std::abs(got.data<float>()[i] - ref[i]));
    size = std::max(size, std::abs(ref[i]));
  }
  return err / size;
}

}  // namespace

TEST_CASE("Conv2D gradients for strides 1 and 2, both paddings, non-square sizes, batch 2") {
  for (const std::string padding : {"valid", "same"}) {
    CAPTURE(padding);
    check_op("Conv2D", {{2, 5, 7, 3}, {3, 2, 3, 4}}, OpCheck{.attrs = conv_attrs(1, 1, padding)});
    check_op("Conv2D", {{2, 7, 6, 2}, {3, 3, 2, 3}}, OpCheck{.attrs = conv_attrs(2, 2, padding)});
    check_op("Conv2D", {{3, 6, 5, 1}, {2, 3, 1, 2}}, OpCheck{.attrs = conv_attrs(2, 1, padding)});
    // 45 taps: im2col and sgemm; 18 taps and 17 filters: the direct sums' group of 16 and one more.
    check_op("Conv2D", {{2, 5, 5, 5}, {3, 3, 5, 2}}, OpCheck{.attrs = conv_attrs(1, 1, padding)});
    check_op("Conv2D", {{2, 4, 5, 2}, {3, 3, 2, 17}}, OpCheck{.attrs = conv_attrs(1, 2, padding)});
  }
}

TEST_CASE("Conv2D matches a direct convolution") {
  struct Case {
    Shape x, k;
    std::int64_t sh, sw;
  };
  // 4 x 9 x 10 spans more than one 64-pixel block; kernels of even and odd sizes shift "same" padding.
  // Kernels of up to 32 taps are summed directly (16 filters at a time, then the rest one by one), larger
  // ones by im2col and sgemm: the cases cover 16, 20 and 5 filters directly and 72 and 50 taps by sgemm.
  const std::vector<Case> cases{{{4, 9, 10, 3}, {3, 3, 3, 5}, 1, 1}, {{2, 8, 11, 2}, {2, 4, 2, 3}, 2, 3},
                                {{3, 5, 5, 1}, {5, 5, 1, 2}, 2, 2},  {{1, 1, 1, 4}, {1, 1, 4, 2}, 1, 1},
                                {{3, 7, 9, 1}, {3, 3, 1, 16}, 2, 1}, {{2, 6, 7, 2}, {3, 3, 2, 20}, 1, 1},
                                {{2, 6, 6, 8}, {3, 3, 8, 5}, 1, 1},  {{2, 7, 5, 2}, {5, 5, 2, 17}, 2, 2}};
  for (const auto& tc : cases)
    for (bool same : {false, true}) {
      CAPTURE(tc.x.to_string());
      CAPTURE(same);
      Tensor x = random_tensor(tc.x, 5), k = random_tensor(tc.k, 6);
      Tensor y = run_op("Conv2D", {x, k}, conv_attrs(tc.sh, tc.sw, same ? "same" : "valid"), 2);
      std::int64_t ho = 0, wo = 0;
      auto ref = naive_conv(x, k, tc.sh, tc.sw, same, ho, wo);
      REQUIRE(y.shape() == Shape{tc.x[0], ho, wo, tc.k[3]});
      for (std::size_t i = 0; i < ref.size(); ++i) CHECK(y.data<float>()[i] == doctest::Approx(ref[i]).epsilon(1e-4));
    }
}

TEST_CASE("Winograd's F(4x4, 3x3) convolution and both its gradients match direct sums") {
  // Channels and filters of 16 and 32, both paddings, outputs whose sides are not multiples of the 4x4
  // tile (and the digits CNN's second convolution, one tile per image), several blocks of tiles and kernel-gradient
  // partials (the 8 x 24 x 20 case), a short last block (45 tiles: 23 and 22), and 10 blocks in 8 partials of two
  // blocks each, the last three empty (1024 tiles, on two threads). Measured errors, as a share of the largest value,
  // 2e-6 to 3.5e-6 in all three; a wrong transform or a misplaced tile is off by the size of the values.
  struct Case {
    Shape x, k;
    bool same;
  };
  const std::vector<Case> cases{{{2, 9, 10, 16}, {3, 3, 16, 32}, true},  {{3, 13, 11, 32}, {3, 3, 32, 16}, false},
                                {{1, 8, 8, 16}, {3, 3, 16, 16}, true},   {{8, 24, 20, 16}, {3, 3, 16, 16}, true},
                                {{4, 4, 4, 16}, {3, 3, 16, 32}, true},   {{2, 7, 8, 16}, {3, 3, 16, 16}, false},
                                {{5, 12, 12, 16}, {3, 3, 16, 16}, true}, {{16, 32, 32, 32}, {3, 3, 32, 32}, true}};
  for (const auto& tc : cases) {
    CAPTURE(tc.x.to_string());
    CAPTURE(tc.k.to_string());
    CAPTURE(tc.same);
    const Attrs attrs = conv_attrs(1, 1, tc.same ? "same" : "valid");
    REQUIRE(cpu::winograd_applies(window_geometry(attrs, tc.x, 3, 3), tc.k[3]));
    Tensor x = random_tensor(tc.x, 31), k = random_tensor(tc.k, 32);
    Tensor y = run_op("Conv2D", {x, k}, attrs, 2);
    std::int64_t ho = 0, wo = 0;
    const std::vector<double> ref = naive_conv(x, k, 1, 1, tc.same, ho, wo);
    REQUIRE(y.shape() == Shape{tc.x[0], ho, wo, tc.k[3]});
    CHECK(relative_error(y, ref) < 2e-5);
    Tensor dy = random_tensor(y.shape(), 33);
    Attrs grad_attrs = attrs;
    grad_attrs.set("window", std::vector<std::int64_t>{3, 3});
    std::vector<double> dx_ref, dk_ref;
    naive_conv_grads(x, k, dy, tc.same, dx_ref, dk_ref);
    CHECK(relative_error(run_op("Conv2DInputGrad", {dy, k, x}, grad_attrs, 2), dx_ref) < 2e-5);
    CHECK(relative_error(run_op("Conv2DKernelGrad", {x, dy}, grad_attrs, 2), dk_ref) < 2e-5);
  }
  // Strides, other kernel sizes, channels off the multiple of 16 and outputs under 4x4 keep to im2col.
  CHECK_FALSE(cpu::winograd_applies(window_geometry(conv_attrs(2, 2, "same"), Shape{1, 16, 16, 16}, 3, 3), 16));
  CHECK_FALSE(cpu::winograd_applies(window_geometry(conv_attrs(1, 1, "same"), Shape{1, 16, 16, 16}, 5, 5), 16));
  CHECK_FALSE(cpu::winograd_applies(window_geometry(conv_attrs(1, 1, "same"), Shape{1, 16, 16, 24}, 3, 3), 16));
  CHECK_FALSE(cpu::winograd_applies(window_geometry(conv_attrs(1, 1, "same"), Shape{1, 16, 16, 16}, 3, 3), 20));
  CHECK_FALSE(cpu::winograd_applies(window_geometry(conv_attrs(1, 1, "same"), Shape{1, 3, 3, 16}, 3, 3), 32));
}

TEST_CASE("Conv2D \"same\" keeps ceil(in / stride) and puts the odd padding at the bottom and right") {
  // A 2x2 kernel of ones with stride 1 over 3x3: padding 0 before, 1 after, so output (2, 2) sums x[2..3, 2..3].
  Tensor x = Tensor::from_floats(Shape{1, 3, 3, 1}, std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor k = Tensor::filled(Shape{2, 2, 1, 1}, 1.0f);
  Tensor y = run_op("Conv2D", {x, k}, conv_attrs(1, 1, "same"));
  CHECK(y.shape() == Shape{1, 3, 3, 1});
  CHECK(y.to_floats() == std::vector<float>{12, 16, 9, 24, 28, 15, 15, 17, 9});
  CHECK(run_op("Conv2D", {x, k}, conv_attrs(2, 2, "same")).shape() == Shape{1, 2, 2, 1});
  CHECK(run_op("Conv2D", {x, k}, conv_attrs(2, 2, "valid")).shape() == Shape{1, 1, 1, 1});
}

TEST_CASE("Conv2D and its gradients give identical bits on 1 and 2 threads") {
  // 8 x 12 x 12 = 1152 output pixels: several forward blocks and kernel-gradient partials, on the direct
  // path (27 taps; 8 filters, and 20: one group of 16 and 4 more) and the sgemm path (72 taps); 32 x 16 x 16
  // pixels of 32 channels on the Winograd path (4 blocks of tiles, 4 kernel-gradient partials).
  const std::vector<std::pair<Shape, Shape>> shapes{{{8, 12, 12, 3}, {3, 3, 3, 8}},
                                                    {{8, 12, 12, 3}, {3, 3, 3, 20}},
                                                    {{8, 12, 12, 8}, {3, 3, 8, 8}},
                                                    {{32, 16, 16, 32}, {3, 3, 32, 32}}};
  for (const auto& [xs, ks] : shapes) {
    for (const std::string padding : {"valid", "same"}) {
      CAPTURE(ks.to_string());
      CAPTURE(padding);
      Tensor x = random_tensor(xs, 11), k = random_tensor(ks, 12);
      const Attrs attrs = conv_attrs(1, 1, padding);
      Tensor y1 = run_op("Conv2D", {x, k}, attrs, 1);
      Tensor y2 = run_op("Conv2D", {x, k}, attrs, 2);
      CHECK(same_bits(y1, y2));
      Tensor dy = random_tensor(y1.shape(), 13);
      Attrs grad_attrs = attrs;
      grad_attrs.set("window", std::vector<std::int64_t>{3, 3});
      CHECK(same_bits(run_op("Conv2DInputGrad", {dy, k, x}, grad_attrs, 1),
                      run_op("Conv2DInputGrad", {dy, k, x}, grad_attrs, 2)));
      CHECK(same_bits(run_op("Conv2DKernelGrad", {x, dy}, grad_attrs, 1),
                      run_op("Conv2DKernelGrad", {x, dy}, grad_attrs, 2)));
    }
  }
}

TEST_CASE("Conv2D kernel gradient matches the sum over pixels across many partials") {
  // 40 x 8 x 8 = 2560 pixels, cut into 4 partials, against a double-precision sum: by blocks of images on
  // the direct path (2 channels, 24 filters), by blocks of pixels on the sgemm path (40 channels, 3 filters).
  for (const auto& [channels, filters] : {std::pair<std::int64_t, std::int64_t>{2, 24}, {40, 3}}) {
    CAPTURE(channels);
    Tensor x = random_tensor(Shape{40, 8, 8, channels}, 21), dy = random_tensor(Shape{40, 8, 8, filters}, 22);
    Attrs attrs = conv_attrs(1, 1, "same");
    attrs.set("window", std::vector<std::int64_t>{1, 1});
    Tensor dk = run_op("Conv2DKernelGrad", {x, dy}, attrs, 2);
    REQUIRE(dk.shape() == Shape{1, 1, channels, filters});
    for (std::int64_t c = 0; c < channels; ++c)
      for (std::int64_t f = 0; f < filters; ++f) {
        double s = 0.0;
        for (std::int64_t p = 0; p < 40 * 64; ++p)
          s += static_cast<double>(x.data<float>()[p * channels + c]) * dy.data<float>()[p * filters + f];
        CHECK(dk.data<float>()[c * filters + f] == doctest::Approx(s).epsilon(1e-4));
      }
  }
}

TEST_CASE("Conv2D kernel gradient with more partials than blocks adds nothing stale") {
  // 32 x 8 x 8 pixels of a 3x3 kernel over 20 channels: 12 im2col blocks in 8 partials, so some partials get
  // no block and must count as zero. A larger call first leaves every partial of this thread's scratch written.
  Attrs attrs = conv_attrs(1, 1, "same");
  attrs.set("window", std::vector<std::int64_t>{3, 3});
  const std::int64_t c = 20, f = 4;
  (void)run_op("Conv2DKernelGrad", {random_tensor(Shape{64, 8, 8, c}, 1), random_tensor(Shape{64, 8, 8, f}, 2)}, attrs);
  const Tensor x = random_tensor(Shape{32, 8, 8, c}, 3), dy = random_tensor(Shape{32, 8, 8, f}, 4);
  const std::vector<float> dk = run_op("Conv2DKernelGrad", {x, dy}, attrs).to_floats();
  const float* px = x.data<float>();
  const float* pd = dy.data<float>();
  for (std::int64_t i = 0; i < 3; ++i)
    for (std::int64_t j = 0; j < 3; ++j)
      for (std::int64_t ch = 0; ch < c; ++ch)
        for (std::int64_t fi = 0; fi < f; ++fi) {
          double s = 0;
          for (std::int64_t n = 0; n < 32; ++n)
            for (std::int64_t oh = 0; oh < 8; ++oh)
              for (std::int64_t ow = 0; ow < 8; ++ow) {
                const std::int64_t ih = oh + i - 1, iw = ow + j - 1;
                if (ih < 0 || ih >= 8 || iw < 0 || iw >= 8) continue;
                s += static_cast<double>(px[((n * 8 + ih) * 8 + iw) * c + ch]) * pd[((n * 8 + oh) * 8 + ow) * f + fi];
              }
          CHECK(dk[static_cast<std::size_t>(((i * 3 + j) * c + ch) * f + fi)] == doctest::Approx(s).epsilon(1e-4));
        }
}

TEST_CASE("Conv2D shape errors name the node") {
  Graph g;
  Output x = g.placeholder("x", DType::kF32, Shape{-1, 4, 5, 3});
  auto expect_error = [&](const Shape& kernel, const Attrs& attrs, const std::string& part) {
    CAPTURE(part);
    Output k = g.placeholder("k", DType::kF32, kernel);
    try {
      g.add("Conv2D", {x, k}, attrs);
      FAIL("expected a ShapeError");
    } catch (const ShapeError& e) {
      const std::string m = e.what();
      CHECK(m.find("Conv2D") != std::string::npos);
      CHECK_MESSAGE(m.find(part) != std::string::npos, m);
    }
  };
  expect_error({5, 5, 3, 2}, conv_attrs(1, 1, "valid"), "kernel 5x5 is larger than the input [?, 4, 5, 3]");
  expect_error({3, 3, 2, 2}, conv_attrs(1, 1, "valid"), "expects 2 input channels");
  expect_error({3, 3, 3, 2}, conv_attrs(1, 1, "full"), "padding must be \"valid\" or \"same\"");
  expect_error({3, 3, 3, 2}, conv_attrs(0, 1, "same"), "strides must be two positive integers");
  expect_error({3, 3}, conv_attrs(1, 1, "same"), "rank 4");
  // "same" accepts a kernel larger than the input.
  Output k = g.placeholder("k", DType::kF32, Shape{5, 5, 3, 2});
  CHECK(g.spec(g.add("Conv2D", {x, k}, conv_attrs(2, 2, "same"))).shape == Shape{-1, 2, 3, 2});
}

// Finite differences for the linear form; the ReLU form's gradients are checked bit for bit against the
// unfused ops' below (finite differences straddle ReLU's kink at this size).
TEST_CASE("FusedConv2D gradients") {
  Attrs attrs = conv_attrs(1, 1, "same");
  attrs.set("activation", std::string("linear"));
  check_op("FusedConv2D", {{2, 5, 4, 3}, {3, 3, 3, 4}, {4}}, OpCheck{.attrs = attrs});
}

TEST_CASE("FusedConv2D gives the bits of Conv2D, BiasAdd and Relu run apart, gradients too") {
  // 40 images of 12x12 make several blocks of im2col rows.
  for (const char* padding : {"same", "valid"}) {
    CAPTURE(padding);
    tctl::testing::check_fused_matches_parts(
        "FusedConv2D", "Conv2D", {random_tensor(Shape{40, 12, 12, 3}, 6), random_tensor(Shape{3, 3, 3, 8}, 7)},
        random_tensor(Shape{8}, 8), conv_attrs(2, 1, padding));
    // Winograd's path applies the bias and ReLU tile row by tile row.
    tctl::testing::check_fused_matches_parts(
        "FusedConv2D", "Conv2D", {random_tensor(Shape{4, 10, 10, 16}, 9), random_tensor(Shape{3, 3, 16, 16}, 10)},
        random_tensor(Shape{16}, 11), conv_attrs(1, 1, padding));
  }
}
