// cuDNN's side of the convolutions (cudnn_conv.h): its legacy convolution API on NHWC tensors, each pass
// planned once per shape and type (descriptors, and the algorithm cuDNN's heuristics rank first among the
// deterministic ones whose workspace fits the im2col budget, kConvScratchBytes), then run on the calling thread's
// stream. Heuristics, not cudnnFind's timings: a timed choice could differ from run to run, and with it the bits.
// tensorctl's kernels are [kh, kw, C, F]; cuDNN's NHWC filters are [F, kh, kw, C], so the kernel is
// transposed on the way in (and the kernel gradient on the way out), a pass over a few thousand floats.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>

#include "core/errors.h"
#include "kernels/cuda/cudnn_conv.h"
#include "kernels/cuda/cudnn_loader.h"
#include "kernels/cuda/device_math.cuh"

namespace tctl::cuda {
namespace {

// One pass at one shape and type: the key of its plan.
struct PlanKey {
  ConvPass pass;
  ComputeType type;
  bool tf32;
  // n, h, w, c, f, kh, kw, stride h and w, pad h and w: the output's size follows (cudnn_expresses).
  std::array<std::int64_t, 11> dims;
  bool operator<(const PlanKey& o) const {
    return std::tie(pass, type, tf32, dims) < std::tie(o.pass, o.type, o.tf32, o.dims);
  }
};

// cuDNN's descriptors of a pass and the algorithm chosen for it (of the pass's own enum); `usable` false when
// cuDNN cannot run it as cudnn_conv.h asks, `why_not` saying why.
struct Plan {
  bool usable = false;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t k = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  int algorithm = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;  // the type the algorithm was ranked and is run under
  std::size_t workspace = 0;
  std::string why_not;  // when not usable, for the run's one line about it
};

// A device's cuDNN handle and plans, made on first use and kept for the process's life, as the library is.
// A handle serves one host thread at a time: every call on it is made under `mu`.
struct DeviceCudnn {
  std::mutex mu;
  cudnnHandle_t handle = nullptr;
  bool refused = false;  // cudnnCreate failed here: the own kernels run every convolution
  std::map<PlanKey, Plan> plans;
};

DeviceCudnn& cudnn_of(const Device& device) {
  static std::mutex mu;
  static std::map<const Device*, std::unique_ptr<DeviceCudnn>> states;
  const std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<DeviceCudnn>& state = states[&device];
  if (!state) state = std::make_unique<DeviceCudnn>();
  return *state;
}

void check_cudnn(const KernelContext& ctx, cudnnStatus_t status, const char* call) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  throw RuntimeError(node_on_device(ctx) + ": " + call + " failed: " + cudnn().error_string(status));
}

cudnnDataType_t data_type(ComputeType type) {
  switch (type) {
    case ComputeType::kBF16:
      return CUDNN_DATA_BFLOAT16;
    case ComputeType::kF16:
      return CUDNN_DATA_HALF;
    case ComputeType::kF32:
      break;
  }
  return CUDNN_DATA_FLOAT;
}

// The transform algorithms (FFT, Winograd): deterministic, but their products are not the float32 sums of
// the direct ones, and can stray past the 1e-4 the op tests allow (TensorFlow skips the non-fused Winograd for
// accuracy too).
bool transforms(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool transforms(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool transforms(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

// Sets the plan's algorithm to the first of cuDNN's ranked ones (`rank(count, &returned, perf)`, its heuristics)
// that succeeds, is deterministic and no transform, does FMA math where float32 must stay exact (no TF32), and
// whose workspace (`bytes(algo, &n)`, asked under the math type it was ranked with, which its run uses) fits;
// otherwise says why not.
template <class Perf, std::size_t N, class Rank, class Bytes>
bool choose(const Cudnn& api, Rank rank, Bytes bytes, bool fma_only, Plan& p) {
  std::array<Perf, N> ranked{};
  int count = 0;
  if (rank(static_cast<int>(N), &count, ranked.data()) != CUDNN_STATUS_SUCCESS) {
    p.why_not = "refused to rank its algorithms";
    return false;
  }
  p.why_not = "has no deterministic algorithm for it";
  for (int i = 0; i < count; ++i) {
    const Perf& r = ranked[i];
    if (r.status != CUDNN_STATUS_SUCCESS || r.determinism != CUDNN_DETERMINISTIC || transforms(r.algo)) continue;
    if (fma_only && r.mathType != CUDNN_FMA_MATH) {
      p.why_not = "has no deterministic algorithm for it without TF32";
      continue;
    }
    std::size_t n = 0;
    if (api.set_math_type(p.conv, r.mathType) != CUDNN_STATUS_SUCCESS || bytes(r.algo, &n) != CUDNN_STATUS_SUCCESS)
      continue;
    if (n > kConvScratchBytes) {
      p.why_not = "has no deterministic algorithm for it within " + std::to_string(kConvScratchBytes >> 20) +
                  " MiB of workspace";
      continue;
    }
    p.algorithm = static_cast<int>(r.algo);
    p.math = r.mathType;
    p.workspace = n;
    return true;
  }
  return false;
}

bool choose_algorithm(const Cudnn& api, cudnnHandle_t h, ConvPass pass, bool fma_only, Plan& p) {
  switch (pass) {
    case ConvPass::kForward:
      return choose<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT>(
          api,
          [&](int n, int* count, auto* perf) {
            return api.forward_algorithms(h, p.x, p.k, p.conv, p.y, n, count, perf);
          },
          [&](auto algo, std::size_t* bytes) { return api.forward_workspace(h, p.x, p.k, p.conv, p.y, algo, bytes); },
          fma_only, p);
    case ConvPass::kInputGrad:
      return choose<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT>(
          api,
          [&](int n, int* count, auto* perf) {
            return api.backward_data_algorithms(h, p.k, p.y, p.conv, p.x, n, count, perf);
          },
          [&](auto algo, std::size_t* bytes) {
            return api.backward_data_workspace(h, p.k, p.y, p.conv, p.x, algo, bytes);
          },
          fma_only, p);
    case ConvPass::kKernelGrad:
      break;
  }
  return choose<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>(
      api,
      [&](int n, int* count, auto* perf) {
        return api.backward_filter_algorithms(h, p.x, p.y, p.conv, p.k, n, count, perf);
      },
      [&](auto algo, std::size_t* bytes) {
        return api.backward_filter_workspace(h, p.x, p.y, p.conv, p.k, algo, bytes);
      },
      fma_only, p);
}

// The plan of `key`, made on first use; unusable when any descriptor is refused or no algorithm fits.
Plan make_plan(const Cudnn& api, cudnnHandle_t h, const PlanKey& key, const WindowGeometry& g, std::int64_t filters) {
  Plan p;
  const cudnnDataType_t t = data_type(key.type);
  const auto i = [](std::int64_t v) { return static_cast<int>(v); };
  const bool described =
      api.create_tensor(&p.x) == CUDNN_STATUS_SUCCESS && api.create_tensor(&p.y) == CUDNN_STATUS_SUCCESS &&
      api.create_filter(&p.k) == CUDNN_STATUS_SUCCESS && api.create_convolution(&p.conv) == CUDNN_STATUS_SUCCESS &&
      api.set_tensor_4d(p.x, CUDNN_TENSOR_NHWC, t, i(g.batch), i(g.channels), i(g.h.in), i(g.w.in)) ==
          CUDNN_STATUS_SUCCESS &&
      api.set_tensor_4d(p.y, CUDNN_TENSOR_NHWC, t, i(g.batch), i(filters), i(g.h.out), i(g.w.out)) ==
          CUDNN_STATUS_SUCCESS &&
      api.set_filter_4d(p.k, t, CUDNN_TENSOR_NHWC, i(filters), i(g.channels), i(g.h.window), i(g.w.window)) ==
          CUDNN_STATUS_SUCCESS &&
      api.set_convolution_2d(p.conv, i(g.h.pad_before), i(g.w.pad_before), i(g.h.stride), i(g.w.stride), 1, 1,
                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) == CUDNN_STATUS_SUCCESS;
  if (!described) {
    p.why_not = "refused its descriptors";
    return p;
  }
  // Reduced operands on tensor cores; float32 in FMAs (exact products, as cuBLAS's pedantic math) unless the
  // run allows TF32.
  const bool fma_only = key.type == ComputeType::kF32 && !key.tf32;
  const cudnnMathType_t asked = key.type != ComputeType::kF32 ? CUDNN_TENSOR_OP_MATH
                                : key.tf32                    ? CUDNN_DEFAULT_MATH
                                                              : CUDNN_FMA_MATH;
  int n = 0, c = 0, ho = 0, wo = 0;
  if (api.set_math_type(p.conv, asked) != CUDNN_STATUS_SUCCESS ||
      api.forward_output_dim(p.conv, p.x, p.k, &n, &c, &ho, &wo) != CUDNN_STATUS_SUCCESS || n != g.batch ||
      c != filters || ho != g.h.out || wo != g.w.out) {
    p.why_not = "sizes its output otherwise";
    return p;
  }
  p.usable = choose_algorithm(api, h, key.pass, fma_only, p);
  return p;
}

template <class T>
__device__ T narrow(float v);
template <>
__device__ float narrow<float>(float v) {
  return v;
}
template <>
__device__ __nv_bfloat16 narrow<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __half narrow<__half>(float v) {
  return __float2half_rn(v);
}
__device__ float widen(float v) { return v; }
__device__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ float widen(__half v) { return __half2float(v); }

template <class To>
struct Narrow {
  const float* from;
  To* to;
  __device__ void operator()(std::int64_t i) const { to[i] = narrow<To>(from[i]); }
};

template <class From>
struct Widen {
  const From* from;
  float* to;
  __device__ void operator()(std::int64_t i) const { to[i] = widen(from[i]); }
};

// to[f, t] = from[t, f]: a [kh, kw, C, F] kernel (`depth` = kh kw C rows of F) as cuDNN's [F, kh, kw, C].
template <class To>
struct KernelToCudnn {
  const float* from;
  To* to;
  std::int64_t depth, filters;
  __device__ void operator()(std::int64_t i) const { to[i % filters * depth + i / filters] = narrow<To>(from[i]); }
};

// to[t, f] = from[f, t]: cuDNN's [F, kh, kw, C] kernel gradient back as [kh, kw, C, F], widened.
template <class From>
struct KernelFromCudnn {
  const From* from;
  float* to;
  std::int64_t depth, filters;
  __device__ void operator()(std::int64_t i) const { to[i] = widen(from[i % filters * depth + i / filters]); }
};

// `elements` values of T in device memory, held by `keep` until the kernel returns (the pool hands the block
// out again only after the work queued on this stream before its release).
template <class T>
T* scratch_of(const KernelContext& ctx, std::int64_t elements, Tensor& keep) {
  const std::int64_t floats = (elements * static_cast<std::int64_t>(sizeof(T)) + 3) / 4;
  keep = Tensor::empty(DType::kF32, Shape{std::max<std::int64_t>(floats, 1)}, &ctx.device());
  return static_cast<T*>(keep.raw_mutable_data());
}

// One pass with operands and results of type T (float, or the reduced type, converted on the way in and out);
// cuDNN's status for the pass's call, the result widened into y only when it succeeded.
template <class T>
cudnnStatus_t run_pass(KernelContext& ctx, const Cudnn& api, cudnnHandle_t h, const Plan& plan, ConvPass pass,
                       const WindowGeometry& g, std::int64_t filters, const float* a, const float* b, float* y) {
  constexpr bool f32 = std::is_same_v<T, float>;
  const std::int64_t depth = g.h.window * g.w.window * g.channels, kernel = depth * filters;
  const std::int64_t xs = g.batch * g.h.in * g.w.in * g.channels, ys = g.batch * g.h.out * g.w.out * filters;
  std::array<Tensor, 4> keep;
  const auto operand = [&](const float* p, std::int64_t n, Tensor& t) -> const T* {
    if constexpr (f32) {
      return p;
    } else {
      T* q = scratch_of<T>(ctx, n, t);
      launch_each(ctx, n, Narrow<T>{p, q});
      return q;
    }
  };
  const auto result = [&](float* p, std::int64_t n, Tensor& t) -> T* {
    if constexpr (f32) {
      return p;
    } else {
      return scratch_of<T>(ctx, n, t);
    }
  };
  const auto widen_into = [&](const T* from, float* to, std::int64_t n) {
    if constexpr (!f32) launch_each(ctx, n, Widen<T>{from, to});
  };
  const auto cudnn_kernel = [&](const float* k, Tensor& t) {
    T* q = scratch_of<T>(ctx, kernel, t);
    launch_each(ctx, kernel, KernelToCudnn<T>{k, q, depth, filters});
    return static_cast<const T*>(q);
  };
  void* workspace =
      plan.workspace > 0 ? scratch_of<char>(ctx, static_cast<std::int64_t>(plan.workspace), keep[3]) : nullptr;
  const float one = 1.0f, zero = 0.0f;
  check_cudnn(ctx, api.set_stream(h, stream_of(ctx)), "cudnnSetStream");
  if (pass == ConvPass::kForward) {
    const T* x = operand(a, xs, keep[0]);
    const T* k = cudnn_kernel(b, keep[1]);
    T* out = result(y, ys, keep[2]);
    const cudnnStatus_t status =
        api.forward(h, &one, plan.x, x, plan.k, k, plan.conv, static_cast<cudnnConvolutionFwdAlgo_t>(plan.algorithm),
                    workspace, plan.workspace, &zero, plan.y, out);
    if (status == CUDNN_STATUS_SUCCESS) widen_into(out, y, ys);
    return status;
  }
  if (pass == ConvPass::kInputGrad) {
    const T* dy = operand(a, ys, keep[0]);
    const T* k = cudnn_kernel(b, keep[1]);
    T* dx = result(y, xs, keep[2]);
    const cudnnStatus_t status = api.backward_data(h, &one, plan.k, k, plan.y, dy, plan.conv,
                                                   static_cast<cudnnConvolutionBwdDataAlgo_t>(plan.algorithm),
                                                   workspace, plan.workspace, &zero, plan.x, dx);
    if (status == CUDNN_STATUS_SUCCESS) widen_into(dx, y, xs);
    return status;
  }
  const T* x = operand(a, xs, keep[0]);
  const T* dy = operand(b, ys, keep[1]);
  T* dk = scratch_of<T>(ctx, kernel, keep[2]);
  const cudnnStatus_t status = api.backward_filter(h, &one, plan.x, x, plan.y, dy, plan.conv,
                                                   static_cast<cudnnConvolutionBwdFilterAlgo_t>(plan.algorithm),
                                                   workspace, plan.workspace, &zero, plan.k, dk);
  if (status == CUDNN_STATUS_SUCCESS) launch_each(ctx, kernel, KernelFromCudnn<T>{dk, y, depth, filters});
  return status;
}

// TCTL_CUDA_CUDNN: unset (the own kernels), "1" (cuDNN where it takes a convolution), or "log" (the same, and
// one line per shape and pass naming the algorithm chosen, for the GPU check).
enum class Asked { kNo, kYes, kLog };
Asked asked() {
  static const Asked value = [] {
    const char* v = std::getenv("TCTL_CUDA_CUDNN");
    if (v == nullptr) return Asked::kNo;
    const std::string s = v;
    return s == "1" ? Asked::kYes : s == "log" ? Asked::kLog : Asked::kNo;
  }();
  return value;
}

// Said once per shape and pass: asked for cuDNN, the run should know where it did not get it.
void say_unused(const KernelContext& ctx, const Plan& plan, ComputeType type) {
  std::fprintf(stderr, "%s: cuDNN %s (%s); tensorctl's own kernels run it\n", node_on_device(ctx).c_str(),
               plan.why_not.c_str(), std::string(compute_type_name(type)).c_str());
}

// The plan of `key` on the handle of `state` (under its lock), both made on first use; nullptr when the handle
// cannot be made, or when neither exists yet while the stream is being captured into a CUDA graph: they are
// not made there, where a failure caused by the capture would be kept for the process, and the own kernels
// run the recorded step.
Plan* plan_of(const KernelContext& ctx, const Cudnn& api, DeviceCudnn& state, const PlanKey& key,
              const WindowGeometry& g, std::int64_t filters) {
  auto found = state.plans.find(key);
  if (found != state.plans.end()) return &found->second;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  const cudaError_t queried = cudaStreamIsCapturing(stream_of(ctx), &capture);
  if (queried != cudaSuccess) cudaGetLastError();  // not left for the next launch's check to report
  if (queried != cudaSuccess || capture != cudaStreamCaptureStatusNone) return nullptr;
  if (state.handle == nullptr && !state.refused) {
    ctx.device().make_current();
    const cudnnStatus_t created = api.create(&state.handle);
    state.refused = created != CUDNN_STATUS_SUCCESS;
    if (state.refused)
      std::fprintf(stderr, "%s: cudnnCreate failed (%s); tensorctl's own kernels run every convolution\n",
                   ctx.device().name().c_str(), api.error_string(created));
  }
  if (state.refused) return nullptr;
  Plan& plan = state.plans.emplace(key, make_plan(api, state.handle, key, g, filters)).first->second;
  if (!plan.usable) {
    say_unused(ctx, plan, key.type);
  } else if (asked() == Asked::kLog) {
    std::fprintf(stderr, "%s: cuDNN algorithm %d, math type %d, workspace %zu bytes (%s)\n",
                 node_on_device(ctx).c_str(), plan.algorithm, static_cast<int>(plan.math), plan.workspace,
                 std::string(compute_type_name(key.type)).c_str());
  }
  return &plan;
}

}  // namespace

bool cudnn_expresses(const WindowGeometry& g, std::int64_t filters) {
  const auto fits = [](const WindowDim& d) {
    return d.in > 0 && d.out > 0 && d.in + 2 * d.pad_before >= d.window &&
           (d.in + 2 * d.pad_before - d.window) / d.stride + 1 == d.out;
  };
  return g.batch > 0 && g.channels > 0 && filters > 0 && fits(g.h) && fits(g.w) &&
         g.batch * g.h.in * g.w.in * g.channels < INT_MAX && g.batch * g.h.out * g.w.out * filters < INT_MAX &&
         g.h.window * g.w.window * g.channels * filters < INT_MAX;
}

bool cudnn_conv(KernelContext& ctx, ConvPass pass, const WindowGeometry& g, std::int64_t filters, const float* a,
                const float* b, float* y) {
  if (asked() == Asked::kNo || !cudnn_expresses(g, filters)) return false;
  const Cudnn& api = cudnn();
  if (!api.loaded) return false;
  static const std::atomic<bool>& allow_tf32 = backend_flag("allow_tf32");
  const ComputeType type = ctx.compute_type();
  const PlanKey key{pass,
                    type,
                    type == ComputeType::kF32 && allow_tf32.load(std::memory_order_relaxed),
                    {g.batch, g.h.in, g.w.in, g.channels, filters, g.h.window, g.w.window, g.h.stride, g.w.stride,
                     g.h.pad_before, g.w.pad_before}};
  DeviceCudnn& state = cudnn_of(ctx.device());
  const std::lock_guard<std::mutex> lock(state.mu);
  Plan* plan = plan_of(ctx, api, state, key, g, filters);
  if (plan == nullptr || !plan->usable) return false;
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  switch (type) {
    case ComputeType::kBF16:
      status = run_pass<__nv_bfloat16>(ctx, api, state.handle, *plan, pass, g, filters, a, b, y);
      break;
    case ComputeType::kF16:
      status = run_pass<__half>(ctx, api, state.handle, *plan, pass, g, filters, a, b, y);
      break;
    case ComputeType::kF32:
      status = run_pass<float>(ctx, api, state.handle, *plan, pass, g, filters, a, b, y);
      break;
  }
  // Refused before it launched anything (the result untouched): the own kernels run it, now and from now on.
  if (status == CUDNN_STATUS_NOT_SUPPORTED || status == CUDNN_STATUS_BAD_PARAM) {
    plan->usable = false;
    plan->why_not = std::string("refused to run it: ") + api.error_string(status);
    say_unused(ctx, *plan, type);
    return false;
  }
  check_cudnn(ctx, status,
              pass == ConvPass::kForward     ? "cudnnConvolutionForward"
              : pass == ConvPass::kInputGrad ? "cudnnConvolutionBackwardData"
                                             : "cudnnConvolutionBackwardFilter");
  return true;
}

std::string cudnn_status() {
  const Cudnn& api = cudnn();
  if (!api.loaded) return api.why_not;
  const std::size_t v = api.get_version();  // major * 10000 + minor * 100 + patch since cuDNN 9
  const std::string version =
      std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
  return version +
         (asked() != Asked::kNo ? ", in use for convolutions" : ", used for convolutions with TCTL_CUDA_CUDNN=1");
}

}  // namespace tctl::cuda
