#include "core/kernel_context.h"

namespace tctl {

Tensor& KernelContext::output() {
  if (fixed_output_) return output_;
  if (!output_.unique() || !(output_.shape() == spec_.shape) || output_.dtype() != spec_.dtype ||
      output_.device() != &device_) {
    try {
      output_ = Tensor::empty(spec_.dtype, spec_.shape, &device_);
    } catch (const RuntimeError& e) {
      // Out of device memory: say which node asked, and for how much (the layer is in the node's name).
      throw RuntimeError(node_.name + " (" + node_.op->name + "): output " + spec_.shape.to_string() + ": " + e.what());
    }
  }
  return output_;
}

std::uint64_t KernelContext::first_element(const Tensor& t) const {
  if (batch_offset_ == 0 || t.shape().rank() == 0 || t.shape()[0] == 0) return 0;
  return static_cast<std::uint64_t>(batch_offset_) * static_cast<std::uint64_t>(t.num_elements() / t.shape()[0]);
}

std::uint64_t KernelContext::random_key_base(std::int64_t stream) const {
  return mix64(seed_ ^ mix64(static_cast<std::uint64_t>(stream)));
}

std::uint64_t KernelContext::random_key(std::int64_t stream) const {
  return mix64(random_key_base(stream) + static_cast<std::uint64_t>(step_));
}

}  // namespace tctl
