// Helpers shared by the CPU kernel files: shape functions and an elementwise loop split over the intra-op pool.
#pragma once

#include <cstdint>

#include "core/autodiff.h"
#include "core/errors.h"
#include "core/kernel_context.h"
#include "core/op_registry.h"

namespace tctl::cpu {

// Elements per intra-op block for cheap elementwise work: below this, splitting costs more than it saves.
inline constexpr std::int64_t kElementwiseGrain = 16384;

// Shape function: inputs 0..n-1 must all have input 0's dtype and shape; the output has them too.
InferFn same_shape_inputs();

// Applies fn(i) for every element index of the output, split across the intra-op pool.
template <class Fn>
void for_each_element(const KernelContext& ctx, std::int64_t n, Fn fn) {
  ctx.parallel_for(n, kElementwiseGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) fn(i);
  });
}

}  // namespace tctl::cpu
