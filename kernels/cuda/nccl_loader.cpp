// The NCCL functions tensorctl calls (multi-worker all-reduce on GPUs: kernels/cuda/collective.cu), defined
// here and forwarded to libnccl, which is opened on the first call. Linked, its 218 MB would load at every
// start, as cuBLAS's did (cublas_loader.cpp), and a machine without it could not start tensorctl at all; opened
// when a run asks for it, its absence is a warning and the gradients are all-reduced on the CPU. The library
// is found by its soname wherever the dynamic loader looks (LD_LIBRARY_PATH: a PyTorch install's
// nvidia/nccl/lib on the GPU machine, see scripts/gpu-check.sh).
#include <nccl.h>

#include <mutex>
#include <string>

#include "kernels/cuda/library_loader.h"
#include "kernels/cuda/nccl_loader.h"

namespace {

struct Nccl {
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRankConfig) comm_init_rank_config = nullptr;
  decltype(&ncclCommGetAsyncError) comm_get_async_error = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  bool loaded = false;
  std::string why_not;  // when not loaded: dlopen's or dlsym's reason
};

// Opened once, and never closed: its communicators live as long as the process.
const Nccl& nccl() {
  static Nccl table;
  static std::once_flag once;
  std::call_once(once, [] {
    tctl::cuda::LibraryLoader library(TCTL_NCCL_LIBRARY, "NCCL");
    library.find("ncclGetVersion", table.get_version);
    library.find("ncclGetUniqueId", table.get_unique_id);
    library.find("ncclCommInitRankConfig", table.comm_init_rank_config);
    library.find("ncclCommGetAsyncError", table.comm_get_async_error);
    library.find("ncclAllReduce", table.all_reduce);
    library.find("ncclCommAbort", table.comm_abort);
    library.find("ncclGetErrorString", table.error_string);
    table.loaded = library.loaded(table.why_not);
  });
  return table;
}

}  // namespace

namespace tctl::cuda {

std::string nccl_missing() { return nccl().why_not; }

}  // namespace tctl::cuda

// Without the library every call fails as NCCL does on a system error, and ncclGetErrorString says why.
extern "C" ncclResult_t ncclGetVersion(int* version) {
  const Nccl& n = nccl();
  return n.loaded ? n.get_version(version) : ncclSystemError;
}

extern "C" ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id) {
  const Nccl& n = nccl();
  return n.loaded ? n.get_unique_id(unique_id) : ncclSystemError;
}

extern "C" ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank,
                                               ncclConfig_t* config) {
  const Nccl& n = nccl();
  return n.loaded ? n.comm_init_rank_config(comm, nranks, comm_id, rank, config) : ncclSystemError;
}

extern "C" ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  const Nccl& n = nccl();
  return n.loaded ? n.comm_get_async_error(comm, async_error) : ncclSystemError;
}

extern "C" ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                      ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const Nccl& n = nccl();
  return n.loaded ? n.all_reduce(sendbuff, recvbuff, count, datatype, op, comm, stream) : ncclSystemError;
}

extern "C" ncclResult_t ncclCommAbort(ncclComm_t comm) {
  const Nccl& n = nccl();
  return n.loaded ? n.comm_abort(comm) : ncclSystemError;
}

extern "C" const char* ncclGetErrorString(ncclResult_t result) {
  const Nccl& n = nccl();
  return n.loaded ? n.error_string(result) : n.why_not.c_str();
}
