#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/device.h"
#include "core/errors.h"
#include "core/tensor.h"
#include "kernels/sim/sim_device.h"

using namespace tctl;

namespace {
SimDevice& sim(int i) { return static_cast<SimDevice&>(*DeviceRegistry::instance().find("sim:" + std::to_string(i))); }

// Whether the mapping that holds `p` was advised to take huge pages: the "hg" flag of its VmFlags line in
// /proc/self/smaps (what madvise(MADV_HUGEPAGE) sets, in any THP mode). -1 where no such line is found.
int huge_page_advised(const void* p) {
  std::ifstream in("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    const std::string first = line.substr(0, line.find(' '));
    const auto dash = first.find('-');
    if (dash != std::string::npos && first.find(':') == std::string::npos) {  // "start-end perms offset ..."
      inside = std::stoull(first.substr(0, dash), nullptr, 16) <= at &&
               at < std::stoull(first.substr(dash + 1), nullptr, 16);
    } else if (inside && first == "VmFlags:") {
      return (line + " ").find(" hg ") != std::string::npos ? 1 : 0;
    }
  }
  return -1;
}
}  // namespace

TEST_CASE("the host asks for huge pages for blocks of 64 MiB and more, and not for smaller ones") {
  const char* off = std::getenv("TCTL_HUGE_PAGES");
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled") || (off != nullptr && std::string(off) == "0")) {
    MESSAGE("skipped: this kernel has no transparent huge pages (or TCTL_HUGE_PAGES=0)");
    return;
  }
  const Tensor big = Tensor::empty(DType::kF32, Shape{std::int64_t{16} << 20});   // 64 MiB
  const Tensor small = Tensor::empty(DType::kF32, Shape{std::int64_t{1} << 20});  // 4 MiB
  CHECK(huge_page_advised(big.data<float>() + (std::int64_t{8} << 20)) == 1);
  CHECK(huge_page_advised(small.data<float>() + (std::int64_t{1} << 19)) == 0);
}

TEST_CASE("device names: cpu, cuda, sim and their numbered forms") {
  CHECK(is_device_name("cpu"));
  CHECK(is_device_name("cuda:3"));
  CHECK(is_device_name("sim"));
  CHECK(is_device_name("sim:1"));
  CHECK_FALSE(is_device_name("sim:"));
  CHECK_FALSE(is_device_name("sim:x"));
  CHECK_FALSE(is_device_name("tpu"));
  CHECK(is_device_name("cuda:10"));
  CHECK(is_device_name("sim:0"));
  CHECK(is_device_name("cpu:0"));
  // One spelling per device: "sim:01" named sim:1 under a second name.
  for (const char* name : {"sim:01", "sim:00", "cuda:007", "cpu:00", "sim:+1", "sim:-1", "sim: 1", "sim:1 ", ""})
    CHECK_FALSE(is_device_name(name));
  CHECK(DeviceRegistry::instance().find("sim") == DeviceRegistry::instance().find("sim:0"));
  CHECK(DeviceRegistry::instance().find("sim:1")->kind() == device_kind("sim"));
  CHECK(DeviceRegistry::instance().find("sim:9") == nullptr);
  CHECK(DeviceRegistry::instance().find("cpu") == cpu_device());
}

TEST_CASE("device_name_error says what is wrong with a name, and nothing for a good one") {
  CHECK(device_name_error("sim:1") == "");
  CHECK(device_name_error("sim:01") ==
        "device \"sim:01\": an index is written as plain digits, without leading zeros, a sign or spaces (expected "
        "cpu, cuda, cuda:N, sim or sim:N)");
  for (const char* name : {"cuda:007", "cpu:00", "sim:+1", "sim:-1", "sim: 1", "cuda:0\t"})
    CHECK(device_name_error(name).find("an index is written as plain digits") != std::string::npos);
  CHECK(device_name_error("") == "expected a device name (cpu, cuda, cuda:N, sim or sim:N), got an empty string");
  CHECK(device_name_error("sim:x") == "unknown device \"sim:x\" (expected cpu, cuda, cuda:N, sim or sim:N)");
  CHECK(device_name_error("cpu:1").starts_with("unknown device"));
  CHECK(device_name_error("tpu:01").starts_with("unknown device"));
  CHECK(device_name_error("sim:\x1b[2J") ==
        "unknown device \"sim:\\u001b[2J\" (expected cpu, cuda, cuda:N, sim or sim:N)");
}

TEST_CASE("a tensor moves between the host and sim devices with its values, and to() keeps one already there") {
  const Tensor host = Tensor::from_floats(Shape{2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  const Tensor on0 = host.to(&sim(0));
  CHECK(on0.device() == &sim(0));
  CHECK(sim(0).owns(on0.raw_data()));
  CHECK(on0.to(&sim(0)).shares_buffer_with(on0));
  const Tensor on1 = on0.to(&sim(1));  // between two devices: through the host
  CHECK(on1.device() == &sim(1));
  CHECK(sim(1).owns(on1.raw_data()));
  CHECK_FALSE(sim(0).owns(on1.raw_data()));
  const Tensor back = on1.to(cpu_device());
  CHECK(back.device() == cpu_device());
  CHECK(back.to_floats() == host.to_floats());
  CHECK(on1.to_floats() == host.to_floats());
  const Tensor copy = on0.clone();
  CHECK(copy.device() == &sim(0));
  CHECK_FALSE(copy.shares_buffer_with(on0));
  CHECK(copy.to_floats() == host.to_floats());
}

TEST_CASE("the sim pool reuses a freed block, but not while work queued before the free may still read it") {
  SimDevice& d = sim(1);
  d.synchronize();
  const std::size_t bytes = 4096 + 128;  // a size no other test uses
  void* a = d.allocate(bytes);
  d.deallocate(a, bytes);
  void* again = d.allocate(bytes);
  CHECK(again == a);  // nothing queued: reused at once

  // Work still queued on the stream reads the block when the host lets go of it.
  d.pause();
  std::vector<char> seen(bytes);
  std::memset(again, 7, bytes);
  d.enqueue([&] { std::memcpy(seen.data(), again, bytes); });
  d.deallocate(again, bytes);
  const DeviceMemoryStats before = d.memory_stats();
  void* other = d.allocate(bytes);
  CHECK(other != again);  // the freed block waits for the queued read
  CHECK(d.memory_stats().deferred_reuses > before.deferred_reuses);
  std::memset(other, 9, bytes);
  CHECK_FALSE(d.record_event()->done());
  d.resume();
  CHECK(seen[0] == 7);
  CHECK(seen[bytes - 1] == 7);
  d.deallocate(other, bytes);
  void* later = d.allocate(bytes);
  CHECK((later == again || later == other));  // the stream has passed both frees
  d.deallocate(later, bytes);
}

TEST_CASE("a copy to a paused sim stream takes its bytes along, so the host may reuse its buffer at once") {
  SimDevice& d = sim(1);
  Tensor target = Tensor::empty(DType::kF32, Shape{4}, &d);
  std::vector<float> source{1, 2, 3, 4};
  d.pause();
  d.copy_from_host(target.raw_mutable_data(), source.data(), 4 * sizeof(float));
  source.assign({9, 9, 9, 9});
  d.resume();
  CHECK(target.to_floats() == std::vector<float>{1, 2, 3, 4});
}

TEST_CASE("an error thrown by queued work comes back from synchronize") {
  SimDevice& d = sim(1);
  d.enqueue([] { throw RuntimeError("queued work failed"); });
  CHECK_THROWS_WITH_AS(d.synchronize(), "queued work failed", RuntimeError);
  CHECK_NOTHROW(d.synchronize());
}

TEST_CASE("a timed sim event notes when the stream reaches it, not when it is recorded") {
  using namespace std::chrono_literals;
  SimDevice& d = sim(1);
  d.synchronize();
  const std::shared_ptr<Event> untimed = d.record_event();
  const std::shared_ptr<Event> first = d.record_timed_event();  // an idle stream reaches it at once
  REQUIRE(first->elapsed_us_since(*first).has_value());
  CHECK(*first->elapsed_us_since(*first) == 0.0);

  d.pause();
  d.enqueue([] { std::this_thread::sleep_for(2ms); });
  std::shared_ptr<Event> inside;  // recorded by work on the stream, which holds the stream already
  d.enqueue([&] { inside = d.record_timed_event(); });
  const std::shared_ptr<Event> second = d.record_timed_event();
  CHECK_FALSE(second->elapsed_us_since(*first).has_value());  // not reached yet
  std::this_thread::sleep_for(5ms);
  d.resume();
  // The stream reached `second` after the 5 ms pause and the 2 ms of work: lower bounds, never flaky.
  REQUIRE(second->elapsed_us_since(*first).has_value());
  CHECK(*second->elapsed_us_since(*first) >= 7000.0);
  CHECK(*first->elapsed_us_since(*second) <= -7000.0);
  REQUIRE(inside != nullptr);
  REQUIRE(inside->elapsed_us_since(*first).has_value());
  CHECK(*inside->elapsed_us_since(*first) >= 7000.0);
  CHECK(*second->elapsed_us_since(*inside) >= 0.0);

  // Untimed events, another device's events and the CPU's cannot time.
  CHECK_FALSE(second->elapsed_us_since(*untimed).has_value());
  CHECK_FALSE(untimed->elapsed_us_since(*first).has_value());
  CHECK_FALSE(second->elapsed_us_since(*sim(0).record_timed_event()).has_value());
  CHECK_FALSE(cpu_device()->record_timed_event()->elapsed_us_since(*done_event()).has_value());
}

TEST_CASE("the host refuses a size that rounding to its alignment would wrap, instead of a tiny block") {
  CHECK_THROWS_AS(cpu_device()->allocate(SIZE_MAX - 10), RuntimeError);
}
