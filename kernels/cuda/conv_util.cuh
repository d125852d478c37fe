// What the CUDA kernels of conv.cu and pooling.cu share: the window index math of core/ops/window.h on NHWC
// inputs, where the gradients gather: each input element finds the output windows that cover it and adds
// their parts in output order (row by row), the order in which the CPU kernels scatter them, no atomics.
#pragma once

#include <cstdint>

#include "core/ops/window.h"
#include "kernels/cuda/device_math.cuh"

namespace tctl::cuda {

// Output positions [first, last) along one dimension.
struct OutRange {
  std::int64_t first, last;
};

// The outputs along d whose window covers input position x (0 <= x < d.in): those o with
// o * stride - pad_before <= x < o * stride - pad_before + window. Pooling clips its windows to the input,
// which changes nothing here, since x lies inside it.
__device__ inline OutRange covering(const WindowDim& d, std::int64_t x) {
  const std::int64_t at = x + d.pad_before;  // x in padded coordinates, where window o starts at o * stride
  const std::int64_t low = at - d.window + 1;
  const std::int64_t first = low <= 0 ? 0 : (low + d.stride - 1) / d.stride;
  const std::int64_t last = at / d.stride + 1;
  return {first, last < d.out ? last : d.out};
}

}  // namespace tctl::cuda
