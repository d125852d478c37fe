// The GPU's own limits, for bench/compare_pytorch_gpu.sh, printed as JSON lines:
//   gemm: the matrix products of one training step of an MLP (784-2048-2048-10 at batch 1024 by default),
//         each timed alone with cuBLAS in FP32 (TF32 off, tensorctl's default) with CUDA events; the step's
//         sum gives a limit in samples/s that tensorctl's training steps are measured against; then again
//         with bfloat16 operands (cublasGemmEx, float32 sums), mixed_bfloat16's limit.
//   copy: host-to-device and device-to-host bandwidth of cudaMemcpyAsync from pinned memory, against
//         tensorctl's copies (Tensor::to, what a copy node runs) of pageable host tensors of the same size;
//         and a copy within the device, whose bytes read plus bytes written per second bound every kernel that
//         streams memory once (an optimizer update moves 7 floats a parameter: Adam reads the gradient and
//         reads and writes the weight and both moments).
//   update: Adam over the MLP's variables (a weight and a bias per layer), as tensorctl's update phase runs
//         it (ApplyAdam ops in a Session, each with its numeric guard and its report to the host), against a
//         reference in this file: per variable a memset of the guard's word, a pass over the gradient and
//         the update, with the same per-element arithmetic, in kernels of a few blocks per multiprocessor
//         and without a session or reports; and against the bound, 8 floats a parameter (the guard's read
//         of the gradient and Adam's 7) at the device's read+write bandwidth.
// Usage: bench_cuda_limits [--widths 784,2048,2048,10] [--batch 1024]
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/session.h"
#include "core/tensor.h"
#include "core/variable.h"

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Milliseconds of one call of `fn` on `stream`: the median of 20 after 3 warm-ups.
template <class F>
double time_ms(cudaStream_t stream, F fn) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  for (int i = 0; i < 3; ++i) fn();
  std::vector<double> ms;
  for (int i = 0; i < 20; ++i) {
    cudaEventRecord(a, stream);
    fn();
    cudaEventRecord(b, stream);
    check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Milliseconds of one call of `fn` on the host's clock: the median of 20 after 3 warm-ups.
template <class F>
double wall_ms(F fn) {
  for (int i = 0; i < 3; ++i) fn();
  std::vector<double> ms;
  for (int i = 0; i < 20; ++i) {
    const auto t = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// C[m, n] = A[m, k] B[k, n] (row-major, transposes as a training step needs them), timed alone: float32
// operands with cublasSgemm, or bfloat16 ones with cublasGemmEx summing in float32 into a float32 C (what
// tensorctl's products run under mixed_bfloat16, without its conversions of the operands).
double gemm_ms(cublasHandle_t h, cudaStream_t s, int m, int n, int k, bool ta, bool tb, bool bf16) {
  const std::size_t operand = bf16 ? 2 : sizeof(float);
  void *a, *b;
  float* c;
  check(cudaMalloc(&a, operand * m * k), "cudaMalloc");
  check(cudaMalloc(&b, operand * k * n), "cudaMalloc");
  check(cudaMalloc(&c, sizeof(float) * m * n), "cudaMalloc");
  cudaMemset(a, 0, operand * m * k);
  cudaMemset(b, 0, operand * k * n);
  const float one = 1, zero = 0;
  const int lda = ta ? m : k, ldb = tb ? k : n;
  const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const double ms = time_ms(s, [&] {
    if (bf16)
      cublasGemmEx(h, op_b, op_a, n, m, k, &one, b, CUDA_R_16BF, ldb, a, CUDA_R_16BF, lda, &zero, c, CUDA_R_32F, n,
                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    else
      cublasSgemm(h, op_b, op_a, n, m, k, &one, static_cast<const float*>(b), ldb, static_cast<const float*>(a), lda,
                  &zero, c, n);
  });
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return ms;
}

void gemm_limit(const std::vector<int>& widths, int batch, bool bf16) {
  cudaStream_t s;
  check(cudaStreamCreate(&s), "cudaStreamCreate");
  cublasHandle_t h;
  cublasCreate(&h);
  cublasSetStream(h, s);
  cublasSetMathMode(h, bf16 ? CUBLAS_DEFAULT_MATH : CUBLAS_PEDANTIC_MATH);
  double step = 0;
  for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
    const int in = widths[l], out = widths[l + 1];
    step += gemm_ms(h, s, batch, out, in, false, false, bf16);            // y = x W
    step += gemm_ms(h, s, in, out, batch, true, false, bf16);             // dW = x^T dy
    if (l > 0) step += gemm_ms(h, s, batch, in, out, false, true, bf16);  // dx = dy W^T
  }
  std::string w;
  for (int x : widths) {
    if (!w.empty()) w += '-';
    w += std::to_string(x);
  }
  std::printf(
      "{\"limit\": \"gemm\", \"precision\": \"%s\", \"mlp\": \"%s\", \"batch\": %d, \"step_ms\": %.4f, "
      "\"samples_per_s\": %.1f}\n",
      bf16 ? "bfloat16" : "float32", w.c_str(), batch, step, batch / (step / 1e3));
  cublasDestroy(h);
  cudaStreamDestroy(s);
}

// Returns the device's read+write bandwidth in GB/s.
double copy_bandwidth(std::size_t bytes) {
  cudaStream_t s;
  check(cudaStreamCreate(&s), "cudaStreamCreate");
  void *pinned, *dev;
  check(cudaMallocHost(&pinned, bytes), "cudaMallocHost");
  check(cudaMalloc(&dev, bytes), "cudaMalloc");
  const double h2d = time_ms(s, [&] { cudaMemcpyAsync(dev, pinned, bytes, cudaMemcpyHostToDevice, s); });
  const double d2h = time_ms(s, [&] { cudaMemcpyAsync(pinned, dev, bytes, cudaMemcpyDeviceToHost, s); });
  void* dev2;
  check(cudaMalloc(&dev2, bytes), "cudaMalloc");
  const double d2d = time_ms(s, [&] { cudaMemcpyAsync(dev2, dev, bytes, cudaMemcpyDeviceToDevice, s); });
  cudaFree(dev2);
  tctl::Device* gpu = tctl::DeviceRegistry::instance().find("cuda:0");
  if (gpu == nullptr) throw std::runtime_error("cuda:0 is absent");
  const tctl::Tensor host = tctl::Tensor::zeros(tctl::DType::kF32, tctl::Shape{static_cast<std::int64_t>(bytes / 4)});
  const tctl::Tensor on_gpu = host.to(gpu);
  const double t_h2d = wall_ms([&] {
    (void)host.to(gpu);
    gpu->synchronize();
  });
  const double t_d2h = wall_ms([&] { (void)on_gpu.to(tctl::cpu_device()); });
  auto gbs = [&](double ms) { return static_cast<double>(bytes) / (ms / 1e3) / 1e9; };
  std::printf(
      "{\"limit\": \"copy\", \"bytes\": %zu, \"cudaMemcpy_pinned_h2d_gbs\": %.2f, \"cudaMemcpy_pinned_d2h_gbs\": %.2f, "
      "\"tensorctl_h2d_gbs\": %.2f, \"tensorctl_d2h_gbs\": %.2f, \"device_read_write_gbs\": %.2f}\n",
      bytes, gbs(h2d), gbs(d2h), gbs(t_h2d), gbs(t_d2h), 2 * gbs(d2d));
  cudaFreeHost(pinned);
  cudaFree(dev);
  cudaStreamDestroy(s);
  return 2 * gbs(d2d);
}

// The reference update: what kernels/cuda/optimizers.cu computes (rounding every operation, no FMA), the
// guard's verdict word set by a memset, found by a pass and read by the update, over a few blocks per
// multiprocessor, Adam's rates formed once per block from the device's learning rate and step.
__global__ void reference_find_non_finite(const float* g, std::int64_t n, unsigned long long* verdict) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    if (!isfinite(g[i])) {
      atomicMin(verdict, 2 * static_cast<unsigned long long>(i) + (isinf(g[i]) ? 1 : 0));
      return;
    }
}

__global__ void reference_adam(const float* g, const float* lr_p, const float* steps_done,
                               const unsigned long long* verdict, std::int64_t n, float* w, float* m, float* v,
                               float b1, float b2, float eps) {
  __shared__ float lr_t;
  if (threadIdx.x == 0) {
    const double t = static_cast<double>(*steps_done) + 1.0;
    lr_t = static_cast<float>(static_cast<double>(*lr_p) * sqrt(1.0 - pow(static_cast<double>(b2), t)) /
                              (1.0 - pow(static_cast<double>(b1), t)));
  }
  __syncthreads();
  if (*verdict != ~0ull) return;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float gi = g[i];
    const float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(__fsub_rn(1.0f, b1), gi));
    const float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(__fsub_rn(1.0f, b2), gi), gi));
    m[i] = mi;
    v[i] = vi;
    w[i] = __fsub_rn(w[i], __fdiv_rn(__fmul_rn(lr_t, mi), __fadd_rn(__fsqrt_rn(vi), eps)));
  }
}

void update_limit(const std::vector<int>& widths, double read_write_gbs) {
  tctl::Device* gpu = tctl::DeviceRegistry::instance().find("cuda:0");
  if (gpu == nullptr) throw std::runtime_error("cuda:0 is absent");
  std::vector<std::int64_t> sizes;
  for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
    sizes.push_back(static_cast<std::int64_t>(widths[l]) * widths[l + 1]);
    sizes.push_back(widths[l + 1]);
  }
  std::int64_t params = 0;
  for (std::int64_t n : sizes) params += n;
  const tctl::Attrs adam{{"beta1", 0.9}, {"beta2", 0.999}, {"epsilon", 1e-7}};

  // tensorctl: the update phase of a step, gradients fed on the device.
  auto g = std::make_shared<tctl::Graph>();
  std::vector<std::shared_ptr<tctl::Variable>> vars;
  std::vector<tctl::Feed> feeds;
  std::vector<tctl::Output> updates;
  {
    tctl::Graph::Scope scope(*g, "optimizer", "cuda:0", tctl::Phase::kUpdate);
    auto scalar_var = [&](const char* name, float value) {
      vars.push_back(std::make_shared<tctl::Variable>(name, tctl::Tensor::scalar(value)));
      vars.back()->place_on(gpu);
      return g->read(vars.back());
    };
    const tctl::Output lr = scalar_var("lr", 1e-3f), step = scalar_var("step", 10.0f);
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      const tctl::Shape shape{sizes[k]};
      std::vector<tctl::VarUse> uses;
      for (const char* slot : {"w", "m", "v"}) {
        vars.push_back(std::make_shared<tctl::Variable>(slot + std::to_string(k),
                                                        tctl::Tensor::filled(shape, *slot == 'w' ? 0.5f : 0.01f)));
        vars.back()->place_on(gpu);
        uses.push_back({vars.back(), true});
      }
      const tctl::Output grad = g->placeholder("g" + std::to_string(k), tctl::DType::kF32, shape);
      feeds.push_back({grad, tctl::Tensor::filled(shape, 1e-3f).to(gpu)});
      updates.push_back(g->add("ApplyAdam", {grad, lr, step}, adam, std::move(uses)));
    }
  }
  tctl::ThreadPool inter(1), intra(1);
  tctl::Session session(g, inter, intra);
  const double ours = wall_ms([&] {
    session.run(feeds, {}, updates);
    gpu->synchronize();
  });

  // The reference, on buffers of its own, timed the same way (launches, then a wait for the stream).
  cudaStream_t s;
  check(cudaStreamCreate(&s), "cudaStreamCreate");
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
  std::vector<float*> buffers;
  auto device_floats = [&](std::int64_t n, float value) {
    float* p;
    check(cudaMalloc(&p, sizeof(float) * static_cast<std::size_t>(n)), "cudaMalloc");
    std::vector<float> host(static_cast<std::size_t>(n), value);
    check(cudaMemcpy(p, host.data(), sizeof(float) * host.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    buffers.push_back(p);
    return p;
  };
  float* lr = device_floats(1, 1e-3f);
  float* step = device_floats(1, 10.0f);
  unsigned long long* verdicts;
  check(cudaMalloc(&verdicts, sizeof(unsigned long long) * sizes.size()), "cudaMalloc");
  struct Var {
    std::int64_t n;
    float *g, *w, *m, *v;
  };
  std::vector<Var> ref;
  for (std::int64_t n : sizes)
    ref.push_back(
        {n, device_floats(n, 1e-3f), device_floats(n, 0.5f), device_floats(n, 0.01f), device_floats(n, 0.01f)});
  const double reference = wall_ms([&] {
    for (std::size_t k = 0; k < ref.size(); ++k) {
      const Var& x = ref[k];
      const unsigned blocks = static_cast<unsigned>(std::min<std::int64_t>((x.n + 255) / 256, 4 * sms));
      cudaMemsetAsync(verdicts + k, 0xff, sizeof(unsigned long long), s);
      reference_find_non_finite<<<blocks, 256, 0, s>>>(x.g, x.n, verdicts + k);
      reference_adam<<<blocks, 256, 0, s>>>(x.g, lr, step, verdicts + k, x.n, x.w, x.m, x.v, 0.9f, 0.999f, 1e-7f);
    }
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  });
  for (float* p : buffers) cudaFree(p);
  cudaFree(verdicts);
  cudaStreamDestroy(s);
  const double bound = 8.0 * 4.0 * static_cast<double>(params) / (read_write_gbs * 1e9) * 1e3;
  std::printf(
      "{\"limit\": \"update\", \"optimizer\": \"adam\", \"variables\": %zu, \"parameters\": %lld, "
      "\"tensorctl_ms\": %.4f, \"reference_ms\": %.4f, \"bound_ms\": %.4f}\n",
      sizes.size(), static_cast<long long>(params), ours, reference, bound);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> widths{784, 2048, 2048, 10};
  int batch = 1024;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--batch") batch = std::stoi(argv[i + 1]);
    if (a == "--widths") {
      widths.clear();
      std::string v = argv[i + 1];
      for (std::size_t p = 0; p <= v.size();) {
        const std::size_t c = std::min(v.find(',', p), v.size());
        widths.push_back(std::stoi(v.substr(p, c - p)));
        p = c + 1;
      }
    }
  }
  try {
    gemm_limit(widths, batch, false);
    gemm_limit(widths, batch, true);
    double read_write_gbs = 0;
    for (std::size_t mb : {1, 16, 128}) read_write_gbs = copy_bandwidth(mb << 20);
    update_limit(widths, read_write_gbs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_limits: %s\n", e.what());
    return 1;
  }
  return 0;
}
