// Two test ops with CUDA kernels for tests/gpu/launch_failure_test.cpp: TestBadLaunch launches with more
// threads per block than any GPU allows (1,024 is the most), so the launch itself fails, reported at once
// and not sticky (cudaErrorInvalidConfiguration in older runtimes, cudaErrorInvalidValue in CUDA 13's on an
// H200); TestGoodLaunch fills its output with 2.
// Both outputs have the input's shape.
#include "core/op_registry.h"
#include "kernels/cuda/launch.h"

namespace tctl::cuda {
namespace {

__global__ void fill(float* y, std::int64_t n, float value) {
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) y[i] = value;
}

void bad_launch(KernelContext& ctx) {
  fill<<<1, 4096, 0, stream_of(ctx)>>>(out<float>(ctx), ctx.output().num_elements(), 1.0f);
  check_launch(ctx);
}

void good_launch(KernelContext& ctx) {
  fill<<<1, kBlock, 0, stream_of(ctx)>>>(out<float>(ctx), ctx.output().num_elements(), 2.0f);
  check_launch(ctx);
}

TCTL_REGISTER_OP({.name = "TestBadLaunch", .num_inputs = 1, .infer = same_as_input(0)});
TCTL_REGISTER_OP({.name = "TestGoodLaunch", .num_inputs = 1, .infer = same_as_input(0)});
TCTL_REGISTER_KERNELS("cuda", {"TestBadLaunch", bad_launch}, {"TestGoodLaunch", good_launch});

}  // namespace
}  // namespace tctl::cuda
