#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {

InferFn same_shape_inputs() {
  return [](const InferContext& c) {
    for (int i = 1; i < c.num_inputs(); ++i) {
      if (!c.shape(i).compatible(c.shape(0)) || c.input(i).dtype != c.input(0).dtype)
        c.fail("input " + std::to_string(i) + " has shape " + c.shape(i).to_string() + " but input 0 has " +
               c.shape(0).to_string());
    }
    return c.input(0);
  };
}

}  // namespace tctl::cpu
