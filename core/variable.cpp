#include "core/variable.h"

#include <utility>

namespace tctl {

Variable::Variable(std::string name, Tensor initial, LockingMode mode, bool trainable)
    : name_(std::move(name)),
      shape_(initial.shape()),
      dtype_(initial.dtype()),
      mode_(mode),
      trainable_(trainable),
      value_(std::move(initial)) {}

Tensor Variable::read() const {
  std::lock_guard lock(mu_);
  return value_;
}

// Under the lock no new snapshot can appear, so a use count of one proves nobody else sees the buffer.
void Variable::make_unique_locked() {
  if (value_.use_count() > 1) value_ = value_.clone();
}

void Variable::assign(const Tensor& value) {
  TCTL_CHECK(value.shape() == shape_ && value.dtype() == dtype_, "assign to " + name_ + " with another shape");
  Tensor copy = value.clone();
  std::lock_guard lock(mu_);
  value_ = std::move(copy);
}

void Variable::assign_add(const Tensor& delta) {
  TCTL_CHECK(delta.num_elements() == shape_.num_elements(), "assign_add to " + name_ + " with another size");
  Update u(*this);
  const float* d = delta.data<float>();
  for (std::int64_t i = 0; i < u.size(); ++i) u.data()[i] += d[i];
}

void Variable::assign_sub(const Tensor& delta) {
  TCTL_CHECK(delta.num_elements() == shape_.num_elements(), "assign_sub to " + name_ + " with another size");
  Update u(*this);
  const float* d = delta.data<float>();
  for (std::int64_t i = 0; i < u.size(); ++i) u.data()[i] -= d[i];
}

Variable::Update::Update(Variable& v) : v_(v), lock_(v.mu_) { v_.make_unique_locked(); }

}  // namespace tctl
