#include "core/kernel_context.h"

namespace tctl {

Tensor& KernelContext::output() {
  if (!output_.unique() || !(output_.shape() == spec_.shape) || output_.dtype() != spec_.dtype ||
      output_.device() != &device_) {
    output_ = Tensor::empty(spec_.dtype, spec_.shape, &device_);
  }
  return output_;
}

std::uint64_t KernelContext::random_key(std::int64_t stream) const {
  return mix64(mix64(seed_ ^ mix64(static_cast<std::uint64_t>(stream))) + static_cast<std::uint64_t>(step_));
}

}  // namespace tctl
