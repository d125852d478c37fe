// Launch helpers of the CUDA kernels: the device's stream, the grid for n elements, and a check after each
// launch that names the node (a bad launch is one line naming the op and the layer, exit 1).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/ceil_div.h"
#include "core/errors.h"
#include "core/kernel_context.h"
#include "kernels/cuda/cuda_device.h"

namespace tctl::cuda {

inline CudaDevice& device_of(const KernelContext& ctx) { return static_cast<CudaDevice&>(ctx.device()); }
inline cudaStream_t stream_of(const KernelContext& ctx) { return device_of(ctx).stream(); }

// The device's cuBLAS handle for one call, set for the products of this kernel: exact FP32 unless the run
// allows TF32 (the backend flag "allow_tf32", set from the config's "allow_tf32"), and held under the device's cuBLAS
// lock until the end of the full expression that calls cuBLAS with it, so calls from several executor threads never
// meet in the shared handle and its workspace (seen on an H200: with them meeting, two runs of a config gave weights a
// few ulp apart; one at a time, the same bits).
class CublasCall {
 public:
  explicit CublasCall(CudaDevice& device)
      : lock_(device.cublas_mutex()), handle_(device.cublas()), device_(device), ordered_(device.has_own_streams()) {
    // The math mode governs cublasSgemm; cublasGemmEx's reduced-precision products name their compute type.
    static const std::atomic<bool>& allow_tf32 = backend_flag("allow_tf32");
    cublasSetMathMode(handle_,
                      allow_tf32.load(std::memory_order_relaxed) ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH);
    device.bind_cublas_to(device.stream());  // the calling thread's own stream, when it holds one
    if (ordered_) cudaStreamWaitEvent(device.stream(), device.cublas_done(), 0);
  }
  ~CublasCall() {
    // Also when own streams appeared during the call: the next product on one of them waits for this one.
    if (ordered_ || device_.has_own_streams()) cudaEventRecord(device_.cublas_done(), device_.stream());
  }
  CublasCall(const CublasCall&) = delete;
  CublasCall& operator=(const CublasCall&) = delete;
  operator cublasHandle_t() const { return handle_; }

 private:
  std::unique_lock<std::mutex> lock_;
  cublasHandle_t handle_;
  CudaDevice& device_;
  bool ordered_;  // own streams exist: the workspace's previous user, on any stream, goes first
};
inline CublasCall cublas_of(const KernelContext& ctx) { return CublasCall(device_of(ctx)); }

inline constexpr int kBlock = 256;
inline unsigned grid_for(std::int64_t n) {
  const std::int64_t blocks = ceil_div(n, kBlock);
  return static_cast<unsigned>(blocks < 65535 * 16 ? blocks : 65535 * 16);  // grid-stride loops cover the rest
}

// The key of a random stream in this step (KernelContext::random_key), for a kernel's draws, as the kernel
// takes it: run eagerly, the key itself; captured into a CUDA graph, whose kernels keep their arguments, the
// stream's base and the recording's step word (CudaDevice::recording_step_word), which each launch writes
// (Replay::launch), so a replay draws its own step's numbers and not the recorded run's. get() in device code.
struct StepKey {
  std::uint64_t key = 0;
  std::uint64_t base = 0;
  const std::int64_t* step = nullptr;  // device memory; null when run eagerly
  TCTL_HOST_DEVICE std::uint64_t get() const {
    return step != nullptr ? mix64(base + static_cast<std::uint64_t>(*step)) : key;
  }
};
inline StepKey step_random_key(const KernelContext& ctx, std::int64_t stream) {
  return {ctx.random_key(stream), ctx.random_key_base(stream), device_of(ctx).recording_step_word()};
}

// "<node> (<op>) on cuda:0": how the backend's errors and notes name the kernel they come from.
std::string node_on_device(const KernelContext& ctx);

// Throws RuntimeError("<node> (<op>) on cuda:0: <launch error>") when the last launch failed.
void check_launch(const KernelContext& ctx);

template <class T>
const T* in(const KernelContext& ctx, int i) {
  return static_cast<const T*>(ctx.input(i).raw_data());
}
// Input i of a node whose inputs from i on are optional (a padding mask), or nullptr when it has none: the
// CUDA side of kernels/cpu/kernel_util.h's optional_floats.
template <class T>
const T* optional_in(const KernelContext& ctx, int i) {
  return ctx.num_inputs() > i ? in<T>(ctx, i) : nullptr;
}

// An operand of row_major_gemm: `p` holds op(X), row-major with row stride `ld`, or X itself when `transposed`;
// in a batch, the next product's operand starts `stride` floats on.
struct GemmOperand {
  const float* p;
  std::int64_t ld;
  bool transposed = false;
  std::int64_t stride = 0;
};
// y = op(A) op(B) + beta y, [rows, cols] row-major with row stride ldy, for `batch` products whose outputs lie
// `stride_y` floats apart: cublasSgemm for one, cublasSgemmStridedBatched for more. cuBLAS is column-major,
// where the same memory holds y^T = op(B)^T op(A)^T: the operands swap places and keep their transposes.
// Under a reduced compute type (KernelContext::compute_type: a product op's, under a mixed precision policy),
// cublasGemmEx multiplies the operands in that type on tensor cores, summing in float32 into y: bfloat16
// converted by cuBLAS as it loads them, float16 converted first (convert_to_f16, into scratch buffers laid
// out as the operands are).
// Throws RuntimeError naming the node when cuBLAS fails.
void row_major_gemm(const KernelContext& ctx, std::int64_t rows, std::int64_t cols, std::int64_t k, GemmOperand a,
                    GemmOperand b, float beta, float* y, std::int64_t ldy, std::int64_t stride_y = 0,
                    std::int64_t batch = 1);
// `batch` matrices of `rows` x `cols` elements, with row stride `ld` and `stride` elements from one matrix to
// the next: what a product's operand reads of its buffer.
struct StridedRows {
  std::int64_t batch, rows, cols, ld, stride;
};
// Converts the elements `x` names at `from` to float16 at the same places of `to`, on the kernel's stream
// (kernels/cuda/reduced.cu); the gaps between them (another head's columns) are neither read nor written.
void convert_to_f16(const KernelContext& ctx, const float* from, void* to, const StridedRows& x);
template <class T>
T* out(KernelContext& ctx) {
  return static_cast<T*>(ctx.output().raw_mutable_data());
}

}  // namespace tctl::cuda
