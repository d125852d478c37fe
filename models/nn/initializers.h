// Weight initializers by their Keras names, drawn from a seeded generator that is the same on every
// platform (the standard distributions are implementation-defined, so they are not used).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tctl {

// "glorot_uniform", "he_normal", "orthogonal", "uniform" (Keras' RandomUniform(-0.05, 0.05)), "zeros".
const std::vector<std::string>& initializer_names();
// A tensor of `shape` drawn for a layer with these fan-in and fan-out.
Tensor initialize(const std::string& name, const Shape& shape, std::int64_t fan_in, std::int64_t fan_out,
                  std::uint64_t seed);

}  // namespace tctl
