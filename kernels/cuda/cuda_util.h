// What every file of the CUDA backend shares: turning a CUDA status into tensorctl's RuntimeError (one
// line naming the device and the call; the run exits 1), and making a device current on this thread.
#pragma once

#include <string>

#include <cuda_runtime.h>

namespace tctl::cuda {

// Throws RuntimeError("cuda:0: cudaMalloc failed: out of memory") unless `status` is cudaSuccess.
void check(cudaError_t status, const std::string& device, const char* call);

// Whether the environment sets `name` to "1": the switches of code written without a GPU at hand, off
// until the GPU check has run it (TCTL_CUDA_FUSED_UPDATES, TCTL_CUDA_GRAPHS).
bool env_flag_on(const char* name);

// Makes GPU `ordinal` current on this thread for the guard's life (CUDA's current device is per thread).
class CurrentDevice {
 public:
  CurrentDevice(int ordinal, const std::string& name);
  ~CurrentDevice();
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace tctl::cuda
