#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include "core/variable.h"

using namespace tctl;

TEST_CASE("a read is a snapshot that later writes do not change") {
  Variable v("v", Tensor::from_floats(Shape{3}, std::vector<float>{1, 2, 3}));
  Tensor snap = v.read();
  v.assign_add(Tensor::filled(Shape{3}, 10.0f));
  CHECK(snap.to_floats() == std::vector<float>{1, 2, 3});
  CHECK(v.read().to_floats() == std::vector<float>{11, 12, 13});
  v.assign_sub(Tensor::filled(Shape{3}, 1.0f));
  CHECK(v.read().to_floats() == std::vector<float>{10, 11, 12});
  v.assign(Tensor::filled(Shape{3}, 0.5f));
  CHECK(v.read().to_floats() == std::vector<float>{0.5f, 0.5f, 0.5f});
}

TEST_CASE("an update with no snapshot outstanding writes in place") {
  Variable v("v", Tensor::zeros(DType::kF32, Shape{4}));
  const void* before = v.read().raw_data();
  v.assign_add(Tensor::filled(Shape{4}, 1.0f));
  CHECK(v.read().raw_data() == before);
}

TEST_CASE("the default mutex mode loses no concurrent update") {
  Variable v("counter", Tensor::zeros(DType::kF32, Shape{16}));
  CHECK(v.locking_mode() == LockingMode::kMutex);
  const Tensor one = Tensor::filled(Shape{16}, 1.0f);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) v.assign_add(one);
    });
  for (auto& t : threads) t.join();
  for (float x : v.read().to_floats()) CHECK(x == 8000.0f);
}

TEST_CASE("locking mode names round-trip") {
  for (auto name : locking_mode_names()) CHECK(locking_mode_name(*parse_locking_mode(name)) == name);
  CHECK_FALSE(parse_locking_mode("spinlock").has_value());
}
