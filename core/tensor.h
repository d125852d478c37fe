// Tensor: an immutable value (dtype, shape) over a ref-counted, 64-byte-aligned buffer tagged with its device.
//
// Copying a Tensor never copies data: both copies share the buffer. Any thread may hold and read a Tensor.
// Only its producer writes it, through mutable_data(), before handing it to anyone else; a Variable is the
// one place mutable state lives (core/variable.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/errors.h"
#include "core/shape.h"

namespace tctl {

// Raw storage of one tensor. Owned through shared_ptr; freed on its device when the last Tensor lets go.
class Buffer {
 public:
  Buffer(Device* device, std::size_t bytes);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device* device() const { return device_; }
  bool host_addressable() const { return host_addressable_; }

  // Buffers allocated by this process so far; tests use it to prove steady-state steps allocate nothing.
  static std::uint64_t allocation_count();

 private:
  Device* device_;
  std::size_t bytes_;
  void* data_;
  bool host_addressable_;
};

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised storage for the producer to fill.
  static Tensor empty(DType dtype, const Shape& shape, Device* device = cpu_device());
  static Tensor zeros(DType dtype, const Shape& shape);
  static Tensor filled(const Shape& shape, float value);
  static Tensor from_floats(const Shape& shape, std::span<const float> values);
  static Tensor from_ints(const Shape& shape, std::span<const std::int32_t> values);
  static Tensor scalar(float value) { return filled(Shape{}, value); }

  bool defined() const { return buffer_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  std::int64_t num_elements() const { return shape_.num_elements(); }
  std::size_t bytes() const { return static_cast<std::size_t>(num_elements()) * dtype_size(dtype_); }
  Device* device() const { return buffer_ ? buffer_->device() : nullptr; }

  // The elements, for code running on the host; a buffer the host cannot address (a GPU's) is an internal
  // error: copy it with to(cpu_device()) first. Kernels get only buffers of their own device.
  template <class T>
  const T* data() const {
    TCTL_DCHECK(buffer_->host_addressable(), "host access to a buffer on " + buffer_->device()->name());
    return static_cast<const T*>(buffer_->data());
  }
  // Writable view for the producer only, before the tensor is shared.
  template <class T>
  T* mutable_data() const {
    TCTL_DCHECK(buffer_->host_addressable(), "host access to a buffer on " + buffer_->device()->name());
    return static_cast<T*>(buffer_->data());
  }
  // The buffer's address on its device, for copies and device code; never dereferenced on the host here.
  const void* raw_data() const { return buffer_ ? buffer_->data() : nullptr; }
  void* raw_mutable_data() const { return buffer_ ? buffer_->data() : nullptr; }

  // A deep copy with its own buffer, on the same device.
  Tensor clone() const;
  // The value on `device`: this tensor when it is there already, else a copy ordered on both devices'
  // streams (a copy to the CPU has arrived when it returns).
  Tensor to(Device* device) const;
  // The same buffer seen with another shape of the same element count.
  Tensor reshaped(const Shape& shape) const;
  // The first `rows` rows ([rows, ...]) of a tensor of rank 1 or more, sharing its buffer: the rest of the
  // buffer stays allocated, unseen, as long as the view lives (release_unseen gives its pages back).
  Tensor leading_rows(std::int64_t rows) const;
  // The first shape.num_elements() elements (at most the buffer's) seen as `shape`, sharing the buffer.
  Tensor prefix(const Shape& shape) const;
  // For the only handle of a host buffer that is larger than this tensor (a prefix): gives the whole pages
  // past this tensor's bytes back to the system, so they no longer count as resident, while the allocation
  // stays whole. Nothing may read them afterwards (they would read as zeros); does nothing on a shared
  // buffer, a device's, or a tail under a page.
  void release_unseen() const;

  // A handle to the same buffer that does not own it: the buffer lives only as long as its owners do, and
  // the view never counts in use_count() or unique(). For a device's recorded work (Device::begin_recording),
  // which names buffers the way a captured CUDA graph holds raw addresses, whose owners keep them in place.
  Tensor unowned() const;

  // How many Tensors share this buffer; 1 means this handle is its only owner.
  long use_count() const { return buffer_.use_count(); }
  // True when this handle is the buffer's only owner, so the caller may write it in place. It also orders
  // the caller after every thread that let go of its own handle (an acquire fence, and the matching
  // annotation for ThreadSanitizer, which does not see fences).
  bool unique() const;

#if defined(__SANITIZE_THREAD__)
  // Under ThreadSanitizer, dropping a handle is announced as a release, to pair with unique().
  Tensor(const Tensor&) = default;
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(const Tensor& other);
  Tensor& operator=(Tensor&& other) noexcept;
  ~Tensor();
#endif
  // Lets go of the buffer and becomes undefined, like Tensor() but without building and copying one.
#if defined(__SANITIZE_THREAD__)
  void reset();
#else
  void reset() {
    buffer_.reset();
    shape_ = Shape();
  }
#endif
  bool shares_buffer_with(const Tensor& other) const { return buffer_ && buffer_ == other.buffer_; }

  // Convenience for tests and tools: the values as floats (int dtypes converted), copied to the host first
  // when they live elsewhere.
  std::vector<float> to_floats() const;
  float item() const;

 private:
  std::shared_ptr<Buffer> buffer_;
  Shape shape_;
  DType dtype_ = DType::kF32;
};

}  // namespace tctl
