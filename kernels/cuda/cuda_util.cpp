#include "kernels/cuda/cuda_util.h"

#include <cstdlib>
#include <cstring>

#include "core/errors.h"
#include "kernels/cuda/launch.h"

namespace tctl::cuda {

void check(cudaError_t status, const std::string& device, const char* call) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clears a non-sticky error, so the next call does not report it again
  throw RuntimeError(device + ": " + call + " failed: " + cudaGetErrorString(status));
}

bool env_flag_on(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::strcmp(value, "1") == 0;
}

CurrentDevice::CurrentDevice(int ordinal, const std::string& name) {
  check(cudaGetDevice(&previous_), name, "cudaGetDevice");
  if (previous_ != ordinal) check(cudaSetDevice(ordinal), name, "cudaSetDevice");
}

CurrentDevice::~CurrentDevice() { cudaSetDevice(previous_); }

void check_launch(const KernelContext& ctx) {
  const cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess) return;
  throw RuntimeError(ctx.node().name + " (" + ctx.node().op->name + ") on " + ctx.device().name() +
                     ": kernel launch failed: " + cudaGetErrorString(status));
}

void row_major_gemm(const KernelContext& ctx, std::int64_t rows, std::int64_t cols, std::int64_t k, GemmOperand a,
                    GemmOperand b, float beta, float* y, std::int64_t ldy, std::int64_t stride_y, std::int64_t batch) {
  const float one = 1.0f;
  const cublasOperation_t op_a = a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N,
                          op_b = b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  const auto m = static_cast<int>(cols), n = static_cast<int>(rows), depth = static_cast<int>(k);
  const cublasStatus_t status =
      batch == 1 ? cublasSgemm(cublas_of(ctx), op_b, op_a, m, n, depth, &one, b.p, static_cast<int>(b.ld), a.p,
                               static_cast<int>(a.ld), &beta, y, static_cast<int>(ldy))
                 : cublasSgemmStridedBatched(cublas_of(ctx), op_b, op_a, m, n, depth, &one, b.p, static_cast<int>(b.ld),
                                             b.stride, a.p, static_cast<int>(a.ld), a.stride, &beta, y,
                                             static_cast<int>(ldy), stride_y, static_cast<int>(batch));
  if (status != CUBLAS_STATUS_SUCCESS)
    throw RuntimeError(ctx.node().name + " (" + ctx.node().op->name + ") on " + ctx.device().name() + ": " +
                       (batch == 1 ? "cublasSgemm" : "cublasSgemmStridedBatched") +
                       " failed: " + cublasGetStatusString(status));
}

}  // namespace tctl::cuda
