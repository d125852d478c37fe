// Element-wise activations on the GPU, computed as the CPU kernels compute them (kernels/cpu/activations.cpp):
// the same formulas in float, so ReLU's results are bit-identical and the others within a few ulp.
#include "core/op_registry.h"
#include "kernels/cuda/launch.h"

namespace tctl::cuda {
namespace {

template <class F>
__global__ void map1(const float* x, float* y, std::int64_t n, F f) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    y[i] = f(x[i]);
}

template <class F>
__global__ void map2(const float* a, const float* b, float* y, std::int64_t n, F f) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    y[i] = f(a[i], b[i]);
}

// y = f(x), x the only input.
template <class F>
void unary(KernelContext& ctx, F f) {
  const std::int64_t n = ctx.input(0).num_elements();
  float* y = out<float>(ctx);
  if (n > 0) map1<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(in<float>(ctx, 0), y, n, f);
  check_launch(ctx);
}

// dx = f(dy, x): inputs (dy, x), as the CPU's gradient kernels take them.
template <class F>
void binary(KernelContext& ctx, F f) {
  const std::int64_t n = ctx.input(0).num_elements();
  float* y = out<float>(ctx);
  if (n > 0) map2<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(in<float>(ctx, 0), in<float>(ctx, 1), y, n, f);
  check_launch(ctx);
}

struct Relu {
  __device__ float operator()(float x) const { return x > 0.0f ? x : 0.0f; }
};
struct ReluGrad {
  __device__ float operator()(float dy, float x) const { return x > 0.0f ? dy : 0.0f; }
};
struct Sigmoid {
  __device__ float operator()(float x) const { return 1.0f / (1.0f + expf(-x)); }
};
struct SigmoidGrad {  // from the output y
  __device__ float operator()(float dy, float y) const { return dy * y * (1.0f - y); }
};
struct Tanh {
  __device__ float operator()(float x) const { return tanhf(x); }
};
struct TanhGrad {  // from the output y
  __device__ float operator()(float dy, float y) const { return dy * (1.0f - y * y); }
};

void relu_cuda(KernelContext& ctx) { unary(ctx, Relu{}); }
void relu_grad_cuda(KernelContext& ctx) { binary(ctx, ReluGrad{}); }
void sigmoid_cuda(KernelContext& ctx) { unary(ctx, Sigmoid{}); }
void sigmoid_grad_cuda(KernelContext& ctx) { binary(ctx, SigmoidGrad{}); }
void tanh_cuda(KernelContext& ctx) { unary(ctx, Tanh{}); }
void tanh_grad_cuda(KernelContext& ctx) { binary(ctx, TanhGrad{}); }

}  // namespace

TCTL_REGISTER_KERNELS(DeviceKind::kCuda, {"Relu", relu_cuda}, {"ReluGrad", relu_grad_cuda}, {"Sigmoid", sigmoid_cuda},
                      {"SigmoidGrad", sigmoid_grad_cuda}, {"Tanh", tanh_cuda}, {"TanhGrad", tanh_grad_cuda});

}  // namespace tctl::cuda
