// The GPU's own limits, for bench/compare_pytorch_gpu.sh, printed as JSON lines:
//   gemm: the matrix products of one training step of an MLP (784-2048-2048-10 at batch 1024 by default),
//         each timed alone with cuBLAS in FP32 (TF32 off, tensorctl's default) with CUDA events; the step's
//         sum gives a limit in samples/s that tensorctl's training steps are measured against.
//   copy: host-to-device and device-to-host bandwidth of cudaMemcpyAsync from pinned memory, against
//         tensorctl's copies (Tensor::to, what a copy node runs) of pageable host tensors of the same size;
//         and a copy within the device, whose bytes read plus bytes written per second bound every kernel that
//         streams memory once (an optimizer update moves 7 floats a parameter: Adam reads the gradient and
//         reads and writes the weight and both moments).
// Usage: bench_cuda_limits [--widths 784,2048,2048,10] [--batch 1024]
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"

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

// C[m, n] = A[m, k] B[k, n] (row-major, transposes as a training step needs them), timed alone.
double gemm_ms(cublasHandle_t h, cudaStream_t s, int m, int n, int k, bool ta, bool tb) {
  float *a, *b, *c;
  check(cudaMalloc(&a, sizeof(float) * m * k), "cudaMalloc");
  check(cudaMalloc(&b, sizeof(float) * k * n), "cudaMalloc");
  check(cudaMalloc(&c, sizeof(float) * m * n), "cudaMalloc");
  cudaMemset(a, 0, sizeof(float) * m * k);
  cudaMemset(b, 0, sizeof(float) * k * n);
  const float one = 1, zero = 0;
  const int lda = ta ? m : k, ldb = tb ? k : n;
  const double ms = time_ms(s, [&] {
    cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &one, b, ldb, a, lda, &zero,
                c, n);
  });
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return ms;
}

void gemm_limit(const std::vector<int>& widths, int batch) {
  cudaStream_t s;
  check(cudaStreamCreate(&s), "cudaStreamCreate");
  cublasHandle_t h;
  cublasCreate(&h);
  cublasSetStream(h, s);
  cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH);
  double step = 0;
  for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
    const int in = widths[l], out = widths[l + 1];
    step += gemm_ms(h, s, batch, out, in, false, false);            // y = x W
    step += gemm_ms(h, s, in, out, batch, true, false);             // dW = x^T dy
    if (l > 0) step += gemm_ms(h, s, batch, in, out, false, true);  // dx = dy W^T
  }
  std::string w;
  for (int x : widths) {
    if (!w.empty()) w += '-';
    w += std::to_string(x);
  }
  std::printf("{\"limit\": \"gemm\", \"mlp\": \"%s\", \"batch\": %d, \"step_ms\": %.4f, \"samples_per_s\": %.1f}\n",
              w.c_str(), batch, step, batch / (step / 1e3));
  cublasDestroy(h);
  cudaStreamDestroy(s);
}

void copy_bandwidth(std::size_t bytes) {
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
  auto wall_ms = [](auto fn) {
    for (int i = 0; i < 3; ++i) fn();
    std::vector<double> ms;
    for (int i = 0; i < 20; ++i) {
      const auto t = std::chrono::steady_clock::now();
      fn();
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count());
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
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
    gemm_limit(widths, batch);
    for (std::size_t mb : {1, 16, 128}) copy_bandwidth(mb << 20);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_limits: %s\n", e.what());
    return 1;
  }
  return 0;
}
