// The shape function of the core tests' own ops whose output is one float.
#pragma once

#include "core/op_registry.h"

namespace tctl::testing {

inline TensorSpec scalar_spec(const InferContext&) { return {DType::kF32, Shape{}}; }

}  // namespace tctl::testing
