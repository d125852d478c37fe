// Variable: named, shared, mutable state; the only mutable state in tensorctl.
//
// A read returns a Tensor snapshot that never changes afterwards. Updates go through the variable's
// LockingMode. Thread-safe: any thread may read or update any variable.
#pragma once

#include <mutex>
#include <string>

#include "core/errors.h"
#include "core/locking_mode.h"
#include "core/tensor.h"

namespace tctl {

class Variable {
 public:
  Variable(std::string name, Tensor initial, LockingMode mode = LockingMode::kMutex, bool trainable = true);
  Variable(const Variable&) = delete;
  Variable& operator=(const Variable&) = delete;

  const std::string& name() const { return name_; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  bool trainable() const { return trainable_; }
  LockingMode locking_mode() const { return mode_; }

  // A snapshot of the current value. It shares the buffer until the next write, which then copies
  // (copy-on-write), so the snapshot stays as it was.
  Tensor read() const;

  void assign(const Tensor& value);
  void assign_add(const Tensor& delta);
  void assign_sub(const Tensor& delta);

  // Exclusive, in-place access for a kernel that updates the variable (an optimizer step). Holds the
  // variable's lock for its lifetime and owns a buffer no snapshot shares.
  class Update {
   public:
    explicit Update(Variable& v);
    float* data() const { return v_.value_.mutable_data<float>(); }
    std::int64_t size() const { return v_.value_.num_elements(); }

   private:
    Variable& v_;
    std::unique_lock<std::mutex> lock_;
  };

 private:
  void make_unique_locked();

  std::string name_;
  Shape shape_;
  DType dtype_;
  LockingMode mode_;
  bool trainable_;
  mutable std::mutex mu_;
  Tensor value_ TCTL_GUARDED_BY(mu_);
};

}  // namespace tctl
