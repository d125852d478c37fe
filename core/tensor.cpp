#include "core/tensor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "core/errors.h"

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace tctl {

namespace {
std::atomic<std::uint64_t> g_allocations{0};
}

Buffer::Buffer(Device* device, std::size_t bytes)
    : device_(device), bytes_(bytes), data_(device->allocate(bytes)), host_addressable_(device->host_addressable()) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
}

Buffer::~Buffer() { device_->deallocate(data_, bytes_); }

std::uint64_t Buffer::allocation_count() { return g_allocations.load(std::memory_order_relaxed); }

Tensor Tensor::empty(DType dtype, const Shape& shape, Device* device) {
  TCTL_CHECK(shape.fully_known(), "Tensor::empty needs a fully known shape, got " + shape.to_string());
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = shape;
  t.buffer_ = std::make_shared<Buffer>(device, static_cast<std::size_t>(shape.num_elements()) * dtype_size(dtype));
  return t;
}

Tensor Tensor::zeros(DType dtype, const Shape& shape) {
  Tensor t = empty(dtype, shape);
  std::memset(t.mutable_data<char>(), 0, t.bytes());
  return t;
}

Tensor Tensor::filled(const Shape& shape, float value) {
  Tensor t = empty(DType::kF32, shape);
  float* p = t.mutable_data<float>();
  for (std::int64_t i = 0; i < t.num_elements(); ++i) p[i] = value;
  return t;
}

Tensor Tensor::from_floats(const Shape& shape, std::span<const float> values) {
  TCTL_CHECK(static_cast<std::int64_t>(values.size()) == shape.num_elements(), "value count does not match shape");
  Tensor t = empty(DType::kF32, shape);
  if (!values.empty()) std::memcpy(t.mutable_data<float>(), values.data(), values.size_bytes());
  return t;
}

Tensor Tensor::from_ints(const Shape& shape, std::span<const std::int32_t> values) {
  TCTL_CHECK(static_cast<std::int64_t>(values.size()) == shape.num_elements(), "value count does not match shape");
  Tensor t = empty(DType::kI32, shape);
  if (!values.empty()) std::memcpy(t.mutable_data<std::int32_t>(), values.data(), values.size_bytes());
  return t;
}

Tensor Tensor::unowned() const {
  Tensor view = *this;
  // The aliasing constructor with an empty owner: the pointer, without a share of the ownership.
  view.buffer_ = std::shared_ptr<Buffer>(std::shared_ptr<Buffer>(), buffer_.get());
  return view;
}

bool Tensor::unique() const {
  if (!buffer_ || buffer_.use_count() != 1) return false;
    // use_count() is a relaxed load; the fence pairs it with the release of the last handle dropped.
    // ThreadSanitizer models no fences (g++ warns, -Wtsan): there the annotation paired with reset()'s
    // __tsan_release stands in for it.
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(buffer_.get());
#else
  std::atomic_thread_fence(std::memory_order_acquire);
#endif
  return true;
}

#if defined(__SANITIZE_THREAD__)
void Tensor::reset() {
  if (buffer_) __tsan_release(buffer_.get());
  buffer_.reset();
  shape_ = Shape();
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (buffer_ && buffer_ != other.buffer_) __tsan_release(buffer_.get());
  buffer_ = other.buffer_;
  shape_ = other.shape_;
  dtype_ = other.dtype_;
  return *this;
}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (buffer_ && buffer_ != other.buffer_) __tsan_release(buffer_.get());
  buffer_ = std::move(other.buffer_);
  shape_ = other.shape_;
  dtype_ = other.dtype_;
  return *this;
}

Tensor::~Tensor() {
  if (buffer_) __tsan_release(buffer_.get());
}
#endif

Tensor Tensor::clone() const {
  if (!defined()) return {};
  Tensor t = empty(dtype_, shape_, device());
  device()->copy_on_device(t.buffer_->data(), buffer_->data(), bytes());
  return t;
}

Tensor Tensor::to(Device* target) const {
  if (!defined() || device() == target) return *this;
  Tensor t = empty(dtype_, shape_, target);
  copy_between(*device(), buffer_->data(), *target, t.buffer_->data(), bytes());
  return t;
}

Tensor Tensor::reshaped(const Shape& shape) const {
  TCTL_CHECK(shape.num_elements() == num_elements(), "reshape changes the element count");
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::leading_rows(std::int64_t rows) const {
  TCTL_CHECK(shape_.rank() >= 1 && rows >= 0 && rows <= shape_[0], "leading_rows: no such rows");
  Tensor t = *this;
  t.shape_.set_dim(0, rows);
  return t;
}

Tensor Tensor::prefix(const Shape& shape) const {
  TCTL_CHECK(defined() && static_cast<std::size_t>(shape.num_elements()) * dtype_size(dtype_) <= buffer_->bytes(),
             "prefix: larger than the buffer");
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

void Tensor::release_unseen() const {
  if (!defined() || !buffer_->host_addressable() || device()->kind() != DeviceKind::cpu() || !unique()) return;
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(buffer_->data());
  const std::uintptr_t from = (begin + bytes() + page - 1) / page * page;
  const std::uintptr_t to = (begin + buffer_->bytes()) / page * page;
  // Advice only: where the system declines, the pages stay resident and nothing else changes.
  if (to > from) (void)::madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED);
}

std::vector<float> Tensor::to_floats() const {
  if (defined() && device()->kind() != DeviceKind::cpu()) return to(cpu_device()).to_floats();
  std::vector<float> out(static_cast<std::size_t>(num_elements()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    switch (dtype_) {
      case DType::kF32:
        out[i] = data<float>()[i];
        break;
      case DType::kI32:
        out[i] = static_cast<float>(data<std::int32_t>()[i]);
        break;
      case DType::kI64:
        out[i] = static_cast<float>(data<std::int64_t>()[i]);
        break;
    }
  }
  return out;
}

float Tensor::item() const {
  TCTL_CHECK(num_elements() == 1, "item() needs exactly one element");
  return to_floats()[0];
}

}  // namespace tctl
