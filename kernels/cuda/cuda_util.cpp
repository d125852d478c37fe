#include "kernels/cuda/cuda_util.h"

#include "core/errors.h"
#include "kernels/cuda/launch.h"

namespace tctl::cuda {

void check(cudaError_t status, const std::string& device, const char* call) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clears a non-sticky error, so the next call does not report it again
  throw RuntimeError(device + ": " + call + " failed: " + cudaGetErrorString(status));
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

}  // namespace tctl::cuda
