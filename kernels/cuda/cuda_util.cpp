#include "kernels/cuda/cuda_util.h"

#include <algorithm>
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

std::string node_on_device(const KernelContext& ctx) {
  return ctx.node().name + " (" + ctx.node().op->name + ") on " + ctx.device().name();
}

void check_launch(const KernelContext& ctx) {
  const cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess) return;
  throw RuntimeError(node_on_device(ctx) + ": kernel launch failed: " + cudaGetErrorString(status));
}

namespace {

// The operand converted to float16 into `scratch`, laid out as it is (same row stride and batch stride): X
// itself, as stored, is `r` rows of `c` (op(X) transposed when `transposed`), and a batch's matrices lie
// `stride` apart (0: one matrix for all). Only the elements the product reads are converted; the scratch spans
// from the first to the last of them.
const void* f16_operand(const KernelContext& ctx, const GemmOperand& x, std::int64_t op_rows, std::int64_t op_cols,
                        std::int64_t batch, Tensor& scratch) {
  const std::int64_t r = x.transposed ? op_cols : op_rows, c = x.transposed ? op_rows : op_cols;
  const std::int64_t matrices = x.stride == 0 ? 1 : batch;
  const std::int64_t span = r == 0 || c == 0 ? 0 : (matrices - 1) * x.stride + (r - 1) * x.ld + c;
  scratch = Tensor::empty(DType::kF32, Shape{std::max<std::int64_t>(1, (span + 1) / 2)}, &ctx.device());
  convert_to_f16(ctx, x.p, scratch.raw_mutable_data(), StridedRows{matrices, r, c, x.ld, x.stride});
  return scratch.raw_data();
}

[[noreturn]] void gemm_failed(const KernelContext& ctx, const char* call, cublasStatus_t status) {
  throw RuntimeError(node_on_device(ctx) + ": " + call + " failed: " + cublasGetStatusString(status));
}

// row_major_gemm under a reduced compute type, with cublasGemmEx or its strided batch and float32 sums into
// float32 y. bfloat16: the float32 operands as they are, which cuBLAS down-converts as it loads them
// (CUBLAS_COMPUTE_32F_FAST_16BF, PyTorch's "medium" matmul precision): no pass over them and no scratch.
// float16: converted first (convert_to_f16), so that a value past float16's range is an infinity, which the
// loss scale's guard finds, whatever cuBLAS's own conversion would make of it.
void reduced_gemm(const KernelContext& ctx, ComputeType type, std::int64_t rows, std::int64_t cols, std::int64_t k,
                  const GemmOperand& a, const GemmOperand& b, float beta, float* y, std::int64_t ldy,
                  std::int64_t stride_y, std::int64_t batch) {
  Tensor a_scratch, b_scratch;  // given back when the kernel returns: the pool orders reuse after this stream's work
  const bool bf16 = type == ComputeType::kBF16;
  const void* pa = bf16 ? a.p : f16_operand(ctx, a, rows, k, batch, a_scratch);
  const void* pb = bf16 ? b.p : f16_operand(ctx, b, k, cols, batch, b_scratch);
  const cudaDataType operand_type = bf16 ? CUDA_R_32F : CUDA_R_16F;
  const cublasComputeType_t compute = bf16 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F;
  const float one = 1.0f;
  const cublasOperation_t op_a = a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N,
                          op_b = b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  const auto m = static_cast<int>(cols), n = static_cast<int>(rows), depth = static_cast<int>(k);
  const cublasStatus_t status =
      batch == 1 ? cublasGemmEx(cublas_of(ctx), op_b, op_a, m, n, depth, &one, pb, operand_type, static_cast<int>(b.ld),
                                pa, operand_type, static_cast<int>(a.ld), &beta, y, CUDA_R_32F, static_cast<int>(ldy),
                                compute, CUBLAS_GEMM_DEFAULT)
                 : cublasGemmStridedBatchedEx(
                       cublas_of(ctx), op_b, op_a, m, n, depth, &one, pb, operand_type, static_cast<int>(b.ld),
                       b.stride, pa, operand_type, static_cast<int>(a.ld), a.stride, &beta, y, CUDA_R_32F,
                       static_cast<int>(ldy), stride_y, static_cast<int>(batch), compute, CUBLAS_GEMM_DEFAULT);
  if (status != CUBLAS_STATUS_SUCCESS)
    gemm_failed(ctx, batch == 1 ? "cublasGemmEx" : "cublasGemmStridedBatchedEx", status);
}

}  // namespace

void row_major_gemm(const KernelContext& ctx, std::int64_t rows, std::int64_t cols, std::int64_t k, GemmOperand a,
                    GemmOperand b, float beta, float* y, std::int64_t ldy, std::int64_t stride_y, std::int64_t batch) {
  if (const ComputeType type = ctx.compute_type(); type != ComputeType::kF32)
    return reduced_gemm(ctx, type, rows, cols, k, a, b, beta, y, ldy, stride_y, batch);
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
    gemm_failed(ctx, batch == 1 ? "cublasSgemm" : "cublasSgemmStridedBatched", status);
}

}  // namespace tctl::cuda
