// The libraries the CUDA backend opens at run time (kernels/cuda/library_loader.h): NCCL found and every
// function tensorctl calls resolved, or the reason it is not; a missing library or function said in one line.
// They need no GPU, so a CUDA build checks them on the build machine, where a misspelt symbol would otherwise
// surface only on a GPU machine. Nothing here in a build without CUDA.
#if defined(TENSORCTL_WITH_CUDA)
#include <doctest/doctest.h>

#include <cublas_v2.h>
#include <dlfcn.h>
#include <nccl.h>

#include <string>

#include "kernels/cuda/library_loader.h"
#include "kernels/cuda/nccl_loader.h"

TEST_CASE("NCCL opens on first use with every function tensorctl calls, or says why not") {
  const std::string why = tctl::cuda::nccl_missing();
  // Where the library itself opens, every function must have been found: a misspelt name fails here.
  const bool present = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL) != nullptr;
  CHECK(why.empty() == present);
  int version = 0;
  if (!why.empty()) {
    MESSAGE("NCCL absent here: " << why);
    CHECK(why.rfind("NCCL could not be loaded: ", 0) == 0);
    CHECK(ncclGetVersion(&version) == ncclSystemError);
    CHECK(std::string(ncclGetErrorString(ncclSystemError)) == why);
    return;
  }
  REQUIRE(ncclGetVersion(&version) == ncclSuccess);
  MESSAGE("NCCL version code " << version);
  CHECK(version >= 22000);  // 2.20 or later: the toolkit's is 2.28
  CHECK(std::string(ncclGetErrorString(ncclSuccess)).find("no error") != std::string::npos);
}

TEST_CASE("cuBLAS opens on first use with every function tensorctl calls, or says why not") {
  // cuBLAS's own status text where the library and every function (cublasGemmEx among them) were found; the
  // loader's reason otherwise, also when the library opens but lacks a function.
  const bool present = ::dlopen(TCTL_CUBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL) != nullptr;
  const std::string text = cublasGetStatusString(CUBLAS_STATUS_SUCCESS);
  MESSAGE("cuBLAS: " << text);
  CHECK((text.rfind("cuBLAS could not be loaded: ", 0) == 0) == !present);
  if (present) CHECK(text == "success");
}

TEST_CASE("a library that is absent, or lacks a function, is one line naming it") {
  int (*fn)(int) = nullptr;
  tctl::cuda::LibraryLoader absent("libtensorctl-absent.so.9", "Absent");
  absent.find("anything", fn);
  std::string why;
  CHECK(!absent.loaded(why));
  CHECK(static_cast<bool>(fn) == false);
  CHECK(why.rfind("Absent could not be loaded: libtensorctl-absent.so.9: cannot open shared object file", 0) == 0);

  if (!tctl::cuda::nccl_missing().empty()) return;  // the next part needs a library that loads
  tctl::cuda::LibraryLoader lacking("libnccl.so.2", "NCCL");
  lacking.find("ncclGetVersion", fn);
  CHECK(lacking.loaded(why));
  lacking.find("ncclNoSuchFunction", fn);
  CHECK(!lacking.loaded(why));
  CHECK(why == "NCCL could not be loaded: libnccl.so.2 lacks ncclNoSuchFunction, which tensorctl calls");
}
#endif
