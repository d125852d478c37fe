// The cuBLAS functions tensorctl calls, defined here and forwarded to libcublas, which is opened on the
// first call (the first product on a CUDA device). Linked, libcublas and the libcublasLt it needs were
// loaded at every start: `tensorctl --version` took 229 MB resident on a machine without a GPU (issue 46,
// finding 11). The call sites are unchanged: cublas_v2.h maps cublasCreate to cublasCreate_v2 and so on,
// and these definitions are the ones the binary links. The library is found by its soname, as the linker
// would have recorded it (TCTL_CUBLAS_LIBRARY, set by CMake from the toolkit's major version).
#include <cublas_v2.h>

#include <mutex>
#include <string>

#include "kernels/cuda/library_loader.h"

namespace {

// cublas_api.h overloads these two for older callers (a cudaDataType compute type), so decltype cannot name
// the ones tensorctl defines.
using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                  const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                  cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
using GemmStridedBatchedEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                                const void*, const void*, cudaDataType, int, long long int, const void*,
                                                cudaDataType, int, long long int, const void*, void*, cudaDataType, int,
                                                long long int, int, cublasComputeType_t, cublasGemmAlgo_t);

struct Cublas {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  decltype(&cublasSgemmStridedBatched) sgemm_strided_batched = nullptr;
  GemmEx gemm_ex = nullptr;
  GemmStridedBatchedEx gemm_strided_batched_ex = nullptr;
  bool loaded = false;
  std::string why_not;  // when not loaded: dlopen's or dlsym's reason
};

// Opened once, and never closed: its handles live as long as the devices that made them.
const Cublas& cublas() {
  static Cublas table;
  static std::once_flag once;
  std::call_once(once, [] {
    tctl::cuda::LibraryLoader library(TCTL_CUBLAS_LIBRARY, "cuBLAS");
    library.find("cublasCreate_v2", table.create);
    library.find("cublasDestroy_v2", table.destroy);
    library.find("cublasSetWorkspace_v2", table.set_workspace);
    library.find("cublasSetStream_v2", table.set_stream);
    library.find("cublasSetMathMode", table.set_math_mode);
    library.find("cublasGetStatusString", table.status_string);
    library.find("cublasSgemm_v2", table.sgemm);
    library.find("cublasSgemmStridedBatched", table.sgemm_strided_batched);
    library.find("cublasGemmEx", table.gemm_ex);
    library.find("cublasGemmStridedBatchedEx", table.gemm_strided_batched_ex);
    table.loaded = library.loaded(table.why_not);
  });
  return table;
}

}  // namespace

// Without the library, cublasCreate fails as cuBLAS does without a driver, and the device says why
// (CudaDevice::cublas names cublasGetStatusString's text); no other function is reached without a handle.
extern "C" cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  const Cublas& c = cublas();
  return c.loaded ? c.create(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

extern "C" cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  const Cublas& c = cublas();
  return c.loaded ? c.destroy(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

extern "C" cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  const Cublas& c = cublas();
  return c.loaded ? c.set_workspace(handle, workspace, bytes) : CUBLAS_STATUS_NOT_INITIALIZED;
}

extern "C" cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  const Cublas& c = cublas();
  return c.loaded ? c.set_stream(handle, stream) : CUBLAS_STATUS_NOT_INITIALIZED;
}

extern "C" cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  const Cublas& c = cublas();
  return c.loaded ? c.set_math_mode(handle, mode) : CUBLAS_STATUS_NOT_INITIALIZED;
}

extern "C" const char* cublasGetStatusString(cublasStatus_t status) {
  const Cublas& c = cublas();
  return c.loaded ? c.status_string(status) : c.why_not.c_str();
}

extern "C" cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float* alpha, const float* a, int lda,
                                         const float* b, int ldb, const float* beta, float* c_out, int ldc) {
  const Cublas& c = cublas();
  return c.loaded ? c.sgemm(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c_out, ldc)
                  : CUBLAS_STATUS_NOT_INITIALIZED;
}

extern "C" cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                                    cublasOperation_t transb, int m, int n, int k, const float* alpha,
                                                    const float* a, int lda, long long int stride_a, const float* b,
                                                    int ldb, long long int stride_b, const float* beta, float* c_out,
                                                    int ldc, long long int stride_c, int batch) {
  const Cublas& c = cublas();
  return c.loaded ? c.sgemm_strided_batched(handle, transa, transb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b,
                                            beta, c_out, ldc, stride_c, batch)
                  : CUBLAS_STATUS_NOT_INITIALIZED;
}

extern "C" cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                       int n, int k, const void* alpha, const void* a, cudaDataType a_type, int lda,
                                       const void* b, cudaDataType b_type, int ldb, const void* beta, void* c_out,
                                       cudaDataType c_type, int ldc, cublasComputeType_t compute,
                                       cublasGemmAlgo_t algo) {
  const Cublas& c = cublas();
  return c.loaded ? c.gemm_ex(handle, transa, transb, m, n, k, alpha, a, a_type, lda, b, b_type, ldb, beta, c_out,
                              c_type, ldc, compute, algo)
                  : CUBLAS_STATUS_NOT_INITIALIZED;
}

extern "C" cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                                     cublasOperation_t transb, int m, int n, int k, const void* alpha,
                                                     const void* a, cudaDataType a_type, int lda,
                                                     long long int stride_a, const void* b, cudaDataType b_type,
                                                     int ldb, long long int stride_b, const void* beta, void* c_out,
                                                     cudaDataType c_type, int ldc, long long int stride_c, int batch,
                                                     cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  const Cublas& c = cublas();
  return c.loaded
             ? c.gemm_strided_batched_ex(handle, transa, transb, m, n, k, alpha, a, a_type, lda, stride_a, b, b_type,
                                         ldb, stride_b, beta, c_out, c_type, ldc, stride_c, batch, compute, algo)
             : CUBLAS_STATUS_NOT_INITIALIZED;
}
