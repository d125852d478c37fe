// The tests' main: doctest's, plus the device mode. With TCTL_TEST_DEVICE set ("cuda:0"), a suite runs its
// device tests on that device (the op tests compare every op there with the CPU: tests/kernels/
// op_test_util.h). When the device is absent the suite is skipped, saying why, with exit status 77, which
// ctest reports as skipped (SKIP_RETURN_CODE in tests/CMakeLists.txt).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>

#include "core/device.h"

int main(int argc, char** argv) {
  if (const char* device = std::getenv("TCTL_TEST_DEVICE"); device != nullptr && *device != '\0') {
    const tctl::DeviceRegistry& registry = tctl::DeviceRegistry::instance();
    if (registry.find(device) == nullptr) {
      std::printf("SKIPPED: these tests need %s, which is absent: %s\n", device, registry.why_absent(device).c_str());
      return 77;
    }
    std::printf("device tests on %s\n", device);
  }
  doctest::Context context(argc, argv);
  return context.run();
}
