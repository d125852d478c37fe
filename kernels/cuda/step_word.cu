// The write of a CUDA graph's step word before each launch (kernels/cuda/recording.cpp, launch.h's StepKey).
#include "kernels/cuda/recording.h"

namespace tctl::cuda {
namespace {

__global__ void set_step(std::int64_t* word, std::int64_t step) { *word = step; }

}  // namespace

void write_step_word(cudaStream_t stream, std::int64_t* word, std::int64_t step) {
  set_step<<<1, 1, 0, stream>>>(word, step);
}

}  // namespace tctl::cuda
