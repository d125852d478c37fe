#include <doctest/doctest.h>

#include <cstdint>

#include "core/tensor.h"

using namespace tctl;

TEST_CASE("copying a tensor shares its buffer; clone copies") {
  Tensor a = Tensor::filled(Shape{3, 4}, 2.0f);
  Tensor b = a;
  CHECK(b.shares_buffer_with(a));
  CHECK(a.use_count() == 2);
  Tensor c = a.clone();
  CHECK_FALSE(c.shares_buffer_with(a));
  CHECK(c.to_floats() == a.to_floats());
}

TEST_CASE("buffers are 64-byte aligned and tagged with their device") {
  for (std::int64_t n : {1, 3, 17, 1000}) {
    Tensor t = Tensor::empty(DType::kF32, Shape{n});
    CHECK(reinterpret_cast<std::uintptr_t>(t.raw_data()) % 64 == 0);
    CHECK(t.device() == cpu_device());
  }
}

TEST_CASE("dtypes, sizes and reshape") {
  Tensor i = Tensor::from_ints(Shape{2, 2}, std::vector<std::int32_t>{1, 2, 3, 4});
  CHECK(i.dtype() == DType::kI32);
  CHECK(i.bytes() == 16);
  Tensor r = i.reshaped(Shape{4});
  CHECK(r.shares_buffer_with(i));
  CHECK(r.to_floats() == std::vector<float>{1, 2, 3, 4});
  CHECK(Tensor::scalar(3.5f).item() == 3.5f);
  CHECK(dtype_size(DType::kI64) == 8);
  CHECK(dtype_name(DType::kF32) == "float32");
}

TEST_CASE("allocation counter counts buffers") {
  auto before = Buffer::allocation_count();
  Tensor a = Tensor::zeros(DType::kF32, Shape{8});
  Tensor b = a;
  CHECK(Buffer::allocation_count() == before + 1);
}
