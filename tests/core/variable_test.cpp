#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <string>
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

namespace {
// Four threads each add 1 to every element `iterations` times; returns the smallest final element.
float count_with(LockingMode mode, int iterations, int widen) {
  Variable v("counter", Tensor::zeros(DType::kF32, Shape{8}), mode);
  const Tensor one = Tensor::filled(Shape{8}, 1.0f);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < iterations; ++i) {
        // The widened read-modify-write race-check uses: yields between each element's read and write.
        Variable::Update u(v);
        for (std::int64_t k = 0; k < u.size(); ++k)
          u.apply(k, [&](float old) {
            for (int y = 0; y < widen; ++y) std::this_thread::yield();
            return old + one.data<float>()[k];
          });
      }
    });
  for (auto& t : threads) t.join();
  auto values = v.read().to_floats();
  return *std::min_element(values.begin(), values.end());
}
}  // namespace

TEST_CASE("every mode but none keeps every concurrent update") {
  for (LockingMode mode : {LockingMode::kMutex, LockingMode::kProcess, LockingMode::kAtomic, LockingMode::kSnapshot}) {
    CAPTURE(locking_mode_name(mode));
    CHECK(count_with(mode, 500, 0) == 2000.0f);
  }
}

TEST_CASE("none loses updates once the read-modify-write is widened") {
  // Lost updates are likely, not certain; widening the window makes them show on two cores. Several
  // tries keep the test from depending on one unlucky schedule.
  bool lost = false;
  for (int attempt = 0; attempt < 5 && !lost; ++attempt) lost = count_with(LockingMode::kNone, 300, 200) < 1200.0f;
  CHECK(lost);
}

TEST_CASE("snapshot and locked reads never tear; a lock-free read is a copy") {
  for (auto name : locking_mode_names()) {
    LockingMode mode = *parse_locking_mode(name);
    CAPTURE(locking_mode_name(mode));
    Variable v("v", Tensor::filled(Shape{4}, 1.0f), mode);
    Tensor r = v.read();
    v.assign_add(Tensor::filled(Shape{4}, 1.0f));
    CHECK(r.to_floats() == std::vector<float>{1, 1, 1, 1});
    CHECK(v.read().to_floats() == std::vector<float>{2, 2, 2, 2});
  }
}

TEST_CASE("one thread may update several process-locked variables at once") {
  Variable a("a", Tensor::zeros(DType::kF32, Shape{2}), LockingMode::kProcess);
  Variable b("b", Tensor::zeros(DType::kF32, Shape{2}), LockingMode::kProcess);
  {
    Variable::Update ua(a);
    Variable::Update ub(b);
    ua.apply(0, [](float x) { return x + 1.0f; });
    ub.apply(1, [](float x) { return x + 2.0f; });
  }
  CHECK(a.read().to_floats() == std::vector<float>{1, 0});
  CHECK(b.read().to_floats() == std::vector<float>{0, 2});
}

namespace {

// A device that says it has own streams and notes which events the work queued next is made to wait for.
class StreamsDevice final : public Device {
 public:
  struct Mark final : Event {
    explicit Mark(int id) : id(id) {}
    bool done() const override { return false; }
    void wait() override {}
    int id;
  };

  DeviceKind kind() const override { return device_kind("sim"); }
  const std::string& name() const override { return name_; }
  bool host_addressable() const override { return true; }
  void* allocate(std::size_t bytes) override {
    return ::operator new (std::max<std::size_t>(bytes, 1), std::align_val_t{64});
  }
  void deallocate(void* p, std::size_t) override { ::operator delete (p, std::align_val_t{64}); }
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_on_device(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void enqueue(std::function<void()> work) override { work(); }
  void synchronize() override {}
  std::shared_ptr<Event> record_event() override { return std::make_shared<Mark>(++recorded); }
  bool has_own_streams() const override { return own; }
  void queue_wait(const Event& e) override { waited.push_back(dynamic_cast<const Mark&>(e).id); }

  bool own = false;
  int recorded = 0;
  std::vector<int> waited;

 private:
  std::string name_ = "streams:0";
};

}  // namespace

TEST_CASE(
    "across a device's own streams a locked write waits for the last one and a read for the last write; "
    "the lock-free modes order nothing (none races there, atomic adds by CAS)") {
  for (auto name : locking_mode_names()) {
    const LockingMode mode = *parse_locking_mode(name);
    INFO(name);
    StreamsDevice d;
    Variable v("v", Tensor::zeros(DType::kF32, Shape{4}), mode);
    v.place_on(&d);
    { Variable::Update u(v); }  // no own streams: nothing recorded, nothing waited for
    CHECK(d.recorded == 0);
    d.own = true;
    { Variable::Update u(v); }  // the first write on own streams: nothing before it to wait for
    CHECK(d.waited.empty());
    { Variable::Update u(v); }
    (void)v.read();
    if (v.lock_free()) {
      CHECK(d.recorded == 0);
      CHECK(d.waited.empty());
      continue;
    }
    CHECK(d.recorded == 2);
    CHECK(d.waited == std::vector<int>{1, 2});
    // Nobody holds a read, but a reader's kernel may still be reading on another stream: not in place.
    const void* before = v.read().raw_data();
    { Variable::Update u(v); }
    CHECK(v.read().raw_data() != before);
    d.waited.clear();
    d.own = false;
    (void)v.read();
    CHECK(d.waited.empty());
  }
}
