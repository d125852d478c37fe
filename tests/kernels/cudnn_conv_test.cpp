// The parts of the cuDNN convolutions (kernels/cuda/cudnn_conv.cu) that need no GPU: the library opens with
// every function tensorctl calls, and the geometries handed to it are exactly those whose output cuDNN's own
// arithmetic gives the size tensorctl's does. Its results on a GPU are compared with the CPU's by the op tests
// with TCTL_CUDA_CUDNN=1 (scripts/gpu-check.sh). Nothing here in a build without CUDA.
#if defined(TENSORCTL_WITH_CUDA)
#include <doctest/doctest.h>

#include <dlfcn.h>

#include <string>

#include "core/ops/window.h"
#include "kernels/cuda/cudnn_conv.h"
#include "kernels/cuda/cudnn_loader.h"

namespace {

// The size of output cuDNN computes for `g` padded by pad_before on both sides, from its descriptors (host
// calls: no handle, no GPU): [n, c, h, w].
std::array<int, 4> cudnn_output(const tctl::cuda::Cudnn& api, const tctl::WindowGeometry& g, int filters) {
  cudnnTensorDescriptor_t x = nullptr;
  cudnnFilterDescriptor_t k = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  REQUIRE(api.create_tensor(&x) == CUDNN_STATUS_SUCCESS);
  REQUIRE(api.create_filter(&k) == CUDNN_STATUS_SUCCESS);
  REQUIRE(api.create_convolution(&conv) == CUDNN_STATUS_SUCCESS);
  const auto i = [](std::int64_t v) { return static_cast<int>(v); };
  REQUIRE(api.set_tensor_4d(x, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, i(g.batch), i(g.channels), i(g.h.in), i(g.w.in)) ==
          CUDNN_STATUS_SUCCESS);
  REQUIRE(api.set_filter_4d(k, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, filters, i(g.channels), i(g.h.window),
                            i(g.w.window)) == CUDNN_STATUS_SUCCESS);
  REQUIRE(api.set_convolution_2d(conv, i(g.h.pad_before), i(g.w.pad_before), i(g.h.stride), i(g.w.stride), 1, 1,
                                 CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) == CUDNN_STATUS_SUCCESS);
  std::array<int, 4> out{};
  if (api.forward_output_dim(conv, x, k, &out[0], &out[1], &out[2], &out[3]) != CUDNN_STATUS_SUCCESS) out = {};
  return out;
}

}  // namespace

TEST_CASE("cuDNN opens on first use with every function tensorctl calls, or says why not") {
  const bool present = ::dlopen(TCTL_CUDNN_LIBRARY, RTLD_NOW | RTLD_LOCAL) != nullptr;
  const tctl::cuda::Cudnn& api = tctl::cuda::cudnn();
  CHECK(api.loaded == present);
  if (!api.loaded) {
    MESSAGE("cuDNN absent here: " << api.why_not);
    CHECK(api.why_not.rfind("cuDNN could not be loaded: ", 0) == 0);
    CHECK(tctl::cuda::cudnn_status() == api.why_not);
    return;
  }
  MESSAGE("cuDNN " << tctl::cuda::cudnn_status());
  CHECK(api.get_version() / 10000 == CUDNN_MAJOR);
  CHECK(std::string(api.error_string(CUDNN_STATUS_BAD_PARAM)) == "CUDNN_STATUS_BAD_PARAM");
  CHECK(tctl::cuda::cudnn_status().rfind(std::to_string(CUDNN_MAJOR) + ".", 0) == 0);
}

TEST_CASE("cuDNN takes exactly the convolutions whose output its symmetric padding sizes as tensorctl does") {
  const tctl::cuda::Cudnn& api = tctl::cuda::cudnn();
  if (!api.loaded) return;  // said by the case above
  int taken = 0, refused = 0;
  for (int in = 1; in <= 9; ++in)
    for (int window = 1; window <= 4; ++window)
      for (int stride = 1; stride <= 3; ++stride)
        for (const bool same : {false, true}) {
          tctl::WindowGeometry g;
          g.batch = 2;
          g.channels = 3;
          if (!tctl::window_dim(in, window, stride, same, g.h) || !tctl::window_dim(in + 1, window, stride, same, g.w))
            continue;
          CAPTURE(in);
          CAPTURE(window);
          CAPTURE(stride);
          CAPTURE(same);
          const std::array<int, 4> out = cudnn_output(api, g, 5);
          const bool sizes_agree =
              out == std::array<int, 4>{2, 5, static_cast<int>(g.h.out), static_cast<int>(g.w.out)};
          CHECK(tctl::cuda::cudnn_expresses(g, 5) == sizes_agree);
          (sizes_agree ? taken : refused) += 1;
        }
  // Both kinds occur: "same" with an even window puts its odd padding after, which cuDNN cannot.
  CHECK(taken > 50);
  CHECK(refused > 10);
  tctl::WindowGeometry huge;
  REQUIRE(tctl::window_dim(4096, 3, 1, true, huge.h));
  REQUIRE(tctl::window_dim(4096, 3, 1, true, huge.w));
  huge.batch = 64;
  huge.channels = 4;
  CHECK_FALSE(tctl::cuda::cudnn_expresses(huge, 8));  // 2^32 input elements: past cuDNN's int dimensions
}
#endif
